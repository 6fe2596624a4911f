"""ShortestPathDistance.forward_many / shortest_paths_many: identical to the per-graph forward and to a plain-Python
statement of the rule, bit for bit."""

import csv
from collections import deque

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gea_graph.transforms import ShortestPathDistance, apply_many
from gea_graph.transforms import spd as spd_module
from gea_graph.transforms.spd import shortest_paths_many

SETTINGS = [(20, 20), (3, 5), (1, 0), (6, 2)]  # (max_distance, max_path); 3 and 1 lie below most diameters
KEYS = ("spd_index", "spd", "spd_path")


def assert_same(batched, single):
    assert len(batched) == len(single)
    for a, b in zip(batched, single):
        for key in KEYS:
            assert a[key].dtype == b[key].dtype == torch.long, key
            assert torch.equal(a[key], b[key]), key


def reference(data, max_distance, max_path):
    """Plain-Python statement of the rule: breadth-first distances; a path steps to the first neighbour (ascending)
    one hop closer; a step takes the last stored edge (u, v), else the last stored (v, u); self-loops ignored."""
    n = int(data.num_nodes)
    edges = [] if data.edge_index is None else data.edge_index.t().tolist()
    forward, backward = {}, {}
    for e, (a, b) in enumerate(edges):
        forward[a, b] = e
        backward[b, a] = e
    step_id = {**backward, **forward}
    adj = [sorted({v for (u, v) in step_id if u == s and v != s}) for s in range(n)]
    dist = []
    for t in range(n):
        d, queue = {t: 0}, deque([t])
        while queue:
            u = queue.popleft()
            for v in adj[u]:
                if v not in d:
                    d[v] = d[u] + 1
                    queue.append(v)
        dist.append(d)  # dist[t][u] = d(u, t) = d(t, u)
    spd, paths = [], []
    for s in range(n):
        for t in range(n):
            d = dist[t].get(s)
            spd.append(max_distance + 1 if d is None else min(d, max_distance))
            path, u = [], s
            while d is not None and u != t and len(path) < max_path:
                v = next(v for v in adj[u] if dist[t].get(v) == dist[t][u] - 1)
                path.append(step_id[u, v])
                u = v
            paths.append(path + [-1] * (max_path - len(path)))
    return torch.tensor(spd, dtype=torch.long), torch.tensor(paths, dtype=torch.long).view(n * n, max_path)


def edges(array):
    return torch.as_tensor(np.asarray(array, dtype=np.int64).reshape(2, -1))


def random_graphs(seed=0):
    """Sparse random multigraphs (self-loops, duplicates, one direction only, often disconnected) mixed with
    edge cases: 0 and 1 nodes, no edges, a child->parent tree, and graphs of exactly 64 and of 65+ nodes."""
    rng = np.random.default_rng(seed)
    graphs = [Data(edge_index=edges([]), num_nodes=0), Data(edge_index=edges([]), num_nodes=1),
              Data(edge_index=edges([[0], [0]]), num_nodes=1), Data(edge_index=None, num_nodes=3),
              Data(edge_index=edges([]), num_nodes=5),
              Data(edge_index=edges([[0, 0, 1, 1, 2, 3, 1], [0, 1, 2, 2, 1, 4, 0]]), num_nodes=6)]
    for n in rng.integers(2, 30, 24).tolist():
        graphs.append(Data(edge_index=edges(rng.integers(0, n, (2, int(rng.integers(0, 2 * n))))), num_nodes=n))
    for n in (64, 65, 100):  # a long path with a few chords and extra random edges: diameters past 20
        chain = np.stack([np.arange(n - 1), np.arange(1, n)])
        extra = rng.integers(0, n, (2, 4))
        graphs.append(Data(edge_index=edges(np.concatenate([chain, extra], 1)), num_nodes=n))
    child = np.arange(1, 40)
    graphs.append(Data(edge_index=edges(np.stack([child, rng.integers(0, child)])), num_nodes=40))
    order = rng.permutation(len(graphs))
    return [graphs[i] for i in order]


@pytest.mark.parametrize("max_distance,max_path", SETTINGS)
def test_forward_many_matches_forward_and_the_rule_on_random_graphs(max_distance, max_path):
    graphs = random_graphs()
    transform = ShortestPathDistance(max_distance, max_path)
    batched = transform.forward_many([g.clone() for g in graphs])
    assert_same(batched, [transform(g.clone()) for g in graphs])
    for data, out in zip(graphs, batched):
        spd, path = reference(data, max_distance, max_path)
        assert torch.equal(out.spd, spd) and torch.equal(out.spd_path, path)


def test_forward_many_on_graphs_of_one_size():
    # All graphs of one size take the row-slicing branch; mixed sizes (above) the masked one.
    rng = np.random.default_rng(3)
    graphs = [Data(edge_index=edges(rng.integers(0, 12, (2, 14))), num_nodes=12) for _ in range(6)]
    transform = ShortestPathDistance(4, 6)
    for data, out in zip(graphs, transform.forward_many([g.clone() for g in graphs])):
        spd, path = reference(data, 4, 6)
        assert torch.equal(out.spd, spd) and torch.equal(out.spd_path, path)


def test_forward_many_in_many_chunks(monkeypatch):
    graphs = random_graphs(1)
    transform = ShortestPathDistance(5, 4)
    whole = transform.forward_many([g.clone() for g in graphs])
    monkeypatch.setattr(spd_module, "MAX_CHUNK_PAIRS", 300)  # chunks of a few graphs; a 100-node graph alone
    assert_same(apply_many(transform, [g.clone() for g in graphs]), whole)


def test_forward_many_past_the_byte_range_next_to_small_graphs():
    # A path of 300 nodes: distances up to 299 take 16-bit digits, for the small graphs in its call too.
    chain = np.stack([np.arange(299), np.arange(1, 300)])
    graphs = random_graphs(2)[:10] + [Data(edge_index=edges(chain), num_nodes=300)]
    for max_distance, max_path in [(280, 3), (20, 20)]:
        transform = ShortestPathDistance(max_distance, max_path)
        batched = transform.forward_many([g.clone() for g in graphs])
        assert_same(batched, [transform(g.clone()) for g in graphs])
    assert batched[-1].spd.view(300, 300)[0, 299] == 20 and batched[-1].spd_path.view(300, 300, 20)[5, 200, 0] == 5


@pytest.fixture(scope="module")
def pcqm_sample(mirror):
    Chem = pytest.importorskip("rdkit.Chem")
    from gea_graph.data.featurizers import mol_arrays

    path = mirror / "pcqm4mv2-sample" / "pcqm4mv2-2k.csv"
    if not path.is_file():
        pytest.skip(f"no PCQM4Mv2 sample at {path}")
    graphs = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            x, edge_index, edge_attr = mol_arrays(Chem.RemoveHs(Chem.MolFromSmiles(row["smiles"])))
            graphs.append(Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(edge_index),
                               edge_attr=torch.from_numpy(edge_attr)))
    return graphs


@pytest.mark.parametrize("max_distance,max_path", [(20, 20), (3, 5)])
def test_forward_many_matches_forward_on_the_pcqm4mv2_sample(pcqm_sample, max_distance, max_path):
    assert len(pcqm_sample) == 1999
    transform = ShortestPathDistance(max_distance, max_path)
    batched = transform.forward_many([g.clone() for g in pcqm_sample])
    assert_same(batched, [transform(g.clone()) for g in pcqm_sample])


def test_shortest_paths_many_compact_dtypes():
    # Graph 0: nodes 0 - 1 - 2; graph 1: one node; graph 2: 32767 copies of edge (1, 0) (the last one wins).
    edge_index = np.concatenate([[[0, 1], [1, 2]], [[1] * 32767, [0] * 32767]], axis=1)
    num_nodes, num_edges = np.array([3, 1, 2]), np.array([2, 0, 32767])
    spd, path = shortest_paths_many(num_nodes[:2], edge_index[:, :2], num_edges[:2], 254, 2)
    assert spd.dtype == np.uint8 and path.dtype == np.int16 and path.shape == (10, 2)
    assert spd.tolist() == [0, 1, 2, 1, 0, 1, 2, 1, 0, 0]
    assert path[2].tolist() == [0, 1] and path[6].tolist() == [1, 0] and (path[[0, 4, 8, 9]] == -1).all()
    spd, path = shortest_paths_many(num_nodes, edge_index, num_edges, 255, 1)
    assert spd.dtype == np.uint16 and path.dtype == np.int32
    assert spd[-4:].tolist() == [0, 1, 1, 0] and path[-4:, 0].tolist() == [-1, 32766, 32766, -1]
    spd, path = shortest_paths_many(np.array([2]), np.zeros((2, 0)), np.array([0]), 70_000, 0)
    assert spd.dtype == np.uint32 and spd.tolist() == [0, 70_001, 70_001, 0] and path.shape == (4, 0)


def test_bad_edge_ids_raise():
    with pytest.raises(ValueError, match=r"edge \[0, 3\] of graph 1 is out of range.*\[0, 3\)"):
        shortest_paths_many(np.array([2, 3]), np.array([[0, 0], [1, 3]]), np.array([1, 1]), 5, 5)
    with pytest.raises(ValueError, match="num_edges sums to 3 but edge_index has 2 edges"):
        shortest_paths_many(np.array([2, 3]), np.array([[0, 0], [1, 1]]), np.array([1, 2]), 5, 5)
    with pytest.raises(ValueError, match=r"edge_index must have shape \[2, E\], got \[3, 2\]"):
        shortest_paths_many(np.array([3]), np.zeros((3, 2)), np.array([2]), 5, 5)
    assert ShortestPathDistance(3).forward_many([]) == []
    with pytest.raises(ValueError, match=r"edge \[-1, 0\] of graph 0"):
        ShortestPathDistance(3)(Data(edge_index=torch.tensor([[-1], [0]]), num_nodes=2))


def test_distances_are_permutation_equivariant():
    # renumbering the nodes renumbers the distance matrix: d'(pi(s), pi(t)) = d(s, t). (A path's edges are not: ties
    # between equally short paths go to the lowest-numbered neighbour, which the renumbering changes.)
    rng = np.random.default_rng(3)
    for data in random_graphs(seed=1):
        n = int(data.num_nodes)
        if n < 2 or data.edge_index is None:
            continue
        perm = torch.as_tensor(rng.permutation(n))
        moved = Data(edge_index=perm[data.edge_index], num_nodes=n)
        transform = ShortestPathDistance(max_distance=6, max_path=3)
        d = transform(data.clone()).spd.view(n, n)
        d_moved = transform(moved).spd.view(n, n)
        assert torch.equal(d_moved[perm][:, perm], d)
        # path lengths (edges kept, up to max_path) are equivariant too
        lengths = (transform(data.clone()).spd_path >= 0).sum(1).view(n, n)
        lengths_moved = (transform(moved).spd_path >= 0).sum(1).view(n, n)
        assert torch.equal(lengths_moved[perm][:, perm], lengths)
