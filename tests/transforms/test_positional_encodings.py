import networkx as nx
import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.transforms import AddRandomWalkPE, Compose
from torch_geometric.utils import from_networkx

from gea_graph.transforms import RWPE, LapPE, ShortestPathDistance, apply_many, parse_pe


def graph(edges, num_nodes):
    ei = torch.tensor(edges, dtype=torch.long).t().reshape(2, -1)
    return Data(edge_index=torch.cat([ei, ei.flip(0)], 1), num_nodes=num_nodes)


def random_graphs(seed=0, count=12):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        g = nx.gnp_random_graph(int(rng.integers(2, 14)), 0.35, seed=int(rng.integers(1 << 30)))
        out.append(from_networkx(g))
    return out


def dense_laplacian(data, normalization):
    n = data.num_nodes
    a = np.zeros((n, n))
    ei = data.edge_index.numpy()
    a[ei[0], ei[1]] = a[ei[1], ei[0]] = 1
    np.fill_diagonal(a, 0)
    d = a.sum(1)
    if normalization is None:
        return np.diag(d) - a
    inv = np.where(d > 0, d, 1) ** -0.5 * (d > 0)
    return np.diag((d > 0).astype(float)) - inv[:, None] * a * inv[None, :]


@pytest.mark.parametrize("normalization", ["sym", None])
def test_lap_pe_matches_dense_eigendecomposition(normalization):
    k = 4
    graphs = random_graphs()
    out = LapPE(k, normalization).forward_many([g.clone() for g in graphs])
    for g, d in zip(graphs, out):
        lap = dense_laplacian(g, normalization)
        val, vec = np.linalg.eigh(lap)
        nxg = nx.Graph()
        nxg.add_nodes_from(range(g.num_nodes))
        nxg.add_edges_from(g.edge_index.t().tolist())
        c = nx.number_connected_components(nxg)
        m = d.lap_mask[0]
        assert m.sum() == min(k, g.num_nodes - c)
        np.testing.assert_allclose(d.lap_eigval[0, m].numpy(), val[c:c + k], atol=1e-5)
        assert torch.all(d.lap_eigval == d.lap_eigval[0])  # repeated on every node
        # Compare spectral projectors of complete eigenvalue groups: invariant to sign and to the basis chosen
        # within a repeated eigenvalue.
        ours = d.lap_eigvec[:, m].double().numpy()
        kept = val[c:c + k]
        for lam in np.unique(np.round(kept, 6)):
            in_ours = np.abs(kept - lam) < 1e-6
            in_full = np.abs(val - lam) < 1e-6
            if in_full.sum() != in_ours.sum():  # group cut by the k limit: basis not comparable
                continue
            p_ours = ours[:, in_ours] @ ours[:, in_ours].T
            p_ref = vec[:, in_full] @ vec[:, in_full].T
            np.testing.assert_allclose(p_ours, p_ref, atol=1e-5)
        assert torch.all(d.lap_eigvec[:, ~m] == 0) and torch.all(d.lap_eigval[:, ~m] == 0)


def test_lap_pe_path_graph_up_to_sign():
    # A path has distinct eigenvalues, so each eigenvector is unique up to sign.
    n = 7
    d = LapPE(3)(graph([(i, i + 1) for i in range(n - 1)], n))
    _, vec = np.linalg.eigh(dense_laplacian(graph([(i, i + 1) for i in range(n - 1)], n), "sym"))
    for j in range(3):
        ours = d.lap_eigvec[:, j].double().numpy()
        assert min(np.abs(ours - vec[:, j + 1]).max(), np.abs(ours + vec[:, j + 1]).max()) < 1e-5
    assert d.lap_eigvec.dtype == torch.float32 and d.lap_mask.dtype == torch.bool


def test_lap_pe_pads_small_single_node_and_edgeless_graphs():
    k = 8
    tri = LapPE(k)(graph([(0, 1), (1, 2), (2, 0)], 3))
    assert tri.lap_eigvec.shape == (3, k) and tri.lap_mask[0].tolist() == [True, True] + [False] * 6
    np.testing.assert_allclose(tri.lap_eigval[0, :2].numpy(), [1.5, 1.5], atol=1e-6)
    single = LapPE(k)(Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=1))
    assert single.lap_eigvec.shape == (1, k) and not single.lap_mask.any()
    edgeless = LapPE(k)(Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=4))
    assert not edgeless.lap_mask.any() and torch.all(edgeless.lap_eigvec == 0)


def test_lap_pe_of_a_graph_does_not_depend_on_the_graphs_computed_with_it():
    """Bit for bit, signs included: a dataset build (chunks of many graphs) and inference (a few molecules) must give
    a molecule the same encoding. torch's batched eigh (MKL) flipped signs with the matrix's place in the stack."""
    rng = np.random.default_rng(0)
    size = 23
    graphs = []
    for seed in range(12):  # trees plus a few edges: molecule-like, with repeated eigenvalues
        g = nx.random_labeled_tree(size, seed=seed)
        g.add_edges_from([tuple(rng.choice(size, 2, replace=False)) for _ in range(3)])
        graphs.append(from_networkx(g))
    together = LapPE(8).forward_many([g.clone() for g in graphs])
    for i, g in enumerate(graphs):
        alone = LapPE(8)(g.clone())
        for key in ("lap_eigvec", "lap_eigval", "lap_mask"):
            assert torch.equal(alone[key], together[i][key]), (i, key)


def test_lap_pe_disconnected_drops_one_null_vector_per_component():
    # Components {0,1,2} (path), {3,4} (edge), {5} (isolated): sym spectra {0,1,2}, {0,2}, {0}.
    d = LapPE(4)(graph([(0, 1), (1, 2), (3, 4)], 6))
    assert d.lap_mask[0].tolist() == [True, True, True, False]
    np.testing.assert_allclose(d.lap_eigval[0, :3].numpy(), [1, 2, 2], atol=1e-6)
    combinatorial = LapPE(3, normalization=None)(graph([(0, 1), (1, 2), (3, 4)], 6))
    np.testing.assert_allclose(combinatorial.lap_eigval[0].numpy(), [1, 2, 3], atol=1e-6)


def test_rwpe_matches_matrix_powers_and_pyg():
    graphs = random_graphs(1)
    out = RWPE(6).forward_many([g.clone() for g in graphs])
    for g, d in zip(graphs, out):
        a = dense_laplacian(g, None)
        a = np.diag(np.diag(a)) - a  # adjacency
        deg = a.sum(1, keepdims=True)
        p = np.divide(a, deg, out=np.zeros_like(a), where=deg > 0)
        ref = np.stack([np.diag(np.linalg.matrix_power(p, s)) for s in range(1, 7)], 1)
        np.testing.assert_allclose(d.rw_pe.numpy(), ref, atol=1e-6)
        if g.num_nodes and (deg > 0).all():
            pyg = AddRandomWalkPE(6, attr_name="pe")(g.clone()).pe
            np.testing.assert_allclose(d.rw_pe.numpy(), pyg.numpy(), atol=1e-5)


def test_rwpe_edge_cases():
    single = RWPE(3)(Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=1))
    assert single.rw_pe.shape == (1, 3) and torch.all(single.rw_pe == 0)
    # Child->parent edges only: the walk is on the undirected tree, so return probabilities are not zero.
    tree = RWPE(2)(Data(edge_index=torch.tensor([[1, 2], [0, 0]]), num_nodes=3))
    np.testing.assert_allclose(tree.rw_pe[:, 1].numpy(), [1, 0.5, 0.5])


def test_spd_matches_networkx_and_paths_are_shortest():
    for g in random_graphs(2) + [graph([(0, 1), (1, 2), (3, 4)], 6)]:
        d = ShortestPathDistance(max_distance=3, max_path=4)(g.clone())
        n = g.num_nodes
        assert d.spd_index.shape == (2, n * n) and d.spd.shape == (n * n,) and d.spd_path.shape == (n * n, 4)
        nxg = nx.Graph()
        nxg.add_nodes_from(range(n))
        nxg.add_edges_from(g.edge_index.t().tolist())
        lengths = dict(nx.all_pairs_shortest_path_length(nxg))
        ei = g.edge_index.t().tolist()
        for p in range(n * n):
            s, t = d.spd_index[:, p].tolist()
            true = lengths[s].get(t)
            assert d.spd[p] == (4 if true is None else min(true, 3))
            path = [e for e in d.spd_path[p].tolist() if e >= 0]
            assert len(path) == (0 if true is None else min(true, 4))
            cur = s
            for e in path:  # consecutive edges leading away from s, toward t
                a, b = ei[e]
                cur = b if a == cur else a
            if true is not None and true <= 4:
                assert cur == t


def _check_spd(data, max_distance, max_path):
    """Distances against networkx, paths: valid edges, each step one hop closer, -1 padding."""
    n = int(data.num_nodes)
    d = ShortestPathDistance(max_distance, max_path)(data.clone())
    assert d.spd_index.dtype == d.spd.dtype == d.spd_path.dtype == torch.long
    assert d.spd_index.shape == (2, n * n) and d.spd.shape == (n * n,)
    assert d.spd_path.shape == (n * n, max_path) and d.spd_path.is_contiguous()
    ii, jj = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    assert torch.equal(d.spd_index, torch.stack([ii.flatten(), jj.flatten()]))
    ei = data.edge_index.t().tolist() if data.edge_index is not None else []
    nxg = nx.Graph()
    nxg.add_nodes_from(range(n))
    nxg.add_edges_from(ei)
    lengths = dict(nx.all_pairs_shortest_path_length(nxg))
    true = np.full((n, n), -1)
    for s, row in lengths.items():
        for t, length in row.items():
            true[s, t] = length
    want = np.where(true < 0, max_distance + 1, np.minimum(true, max_distance))
    np.testing.assert_array_equal(d.spd.view(n, n).numpy(), want)
    paths = d.spd_path.view(n, n, max_path).numpy()
    for s in range(n):
        for t in range(n):
            steps = 0 if true[s, t] < 0 else min(true[s, t], max_path)
            assert (paths[s, t, steps:] == -1).all()
            cur = s
            for e in paths[s, t, :steps]:  # consecutive edges, each one hop closer to t
                a, b = ei[e]
                assert cur in (a, b)
                nxt = b if a == cur else a
                assert true[nxt, t] == true[cur, t] - 1
                cur = nxt


def test_spd_edge_cases_against_networkx():
    rng = np.random.default_rng(5)
    cases = [
        Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=1),  # single node
        Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=4),  # no edges
        Data(edge_index=None, num_nodes=2),
        # self-loops, duplicates, one direction only, an isolated node
        Data(edge_index=torch.tensor([[0, 0, 1, 1, 2, 3], [0, 1, 2, 2, 1, 4]]), num_nodes=6),
    ]
    for _ in range(6):  # sparse random multigraphs, often disconnected
        n = int(rng.integers(2, 30))
        cases.append(Data(edge_index=torch.from_numpy(rng.integers(0, n, (2, int(n * 0.8)))),
                          num_nodes=n))
    for data in cases:
        for max_distance, max_path in [(3, 4), (20, 5), (1, 0)]:
            _check_spd(data, max_distance, max_path)


def test_spd_long_paths_past_the_byte_range():
    # A path of 300 nodes plus a separate edge: distances up to 299 need 16-bit digits. Edge i
    # is (i, i + 1), its reverse is 300 + i.
    n = 302
    ei = torch.tensor([[i, i + 1] for i in range(299)] + [[300, 301]]).t()
    data = Data(edge_index=torch.cat([ei, ei.flip(0)], 1), num_nodes=n)
    d = ShortestPathDistance(max_distance=280, max_path=3)(data)
    spd = d.spd.view(n, n)
    assert spd[0, 299] == 280 and spd[10, 265] == 255 and spd[0, 300] == 281 and spd[300, 301] == 1
    assert d.spd_path.view(n, n, 3)[5, 200].tolist() == [5, 6, 7]
    assert d.spd_path.view(n, n, 3)[200, 5].tolist() == [300 + 199, 300 + 198, 300 + 197]


def test_spd_uses_reverse_edge_ids_on_directed_trees():
    d = ShortestPathDistance(5, 2)(Data(edge_index=torch.tensor([[1, 2], [0, 0]]), num_nodes=3))
    pair = 1 * 3 + 2  # 1 -> 0 -> 2
    assert d.spd[pair] == 2 and d.spd_path[pair].tolist() == [0, 1]


def test_batching_offsets_spd_index():
    graphs = [ShortestPathDistance(4)(graph([(0, 1)], 2)), ShortestPathDistance(4)(graph([(0, 1), (1, 2)], 3))]
    batch = Batch.from_data_list(graphs)
    assert batch.spd_index.shape == (2, 4 + 9)
    assert batch.spd_index[:, 4:].min() == 2 and batch.spd_index.max() == 4
    assert batch.spd_path.shape == (13, 4)  # paths of up to max_distance edges by default


def test_parse_pe_and_apply_many():
    t = parse_pe("lap:3,rw:4,spd:5")
    assert isinstance(t, Compose) and repr(t.transforms[0]) == ("LapPE(k=3, normalization='sym', "
                                                                "keep_trivial=False, padding='zero', solver='numpy')")
    assert parse_pe(None) is None and isinstance(parse_pe("rw:2"), RWPE)
    with pytest.raises(ValueError, match="KIND:N"):
        parse_pe("lap8")
    with pytest.raises(ValueError, match="rw takes none"):
        parse_pe("rw:4:paths=5")
    with pytest.raises(ValueError, match="spd takes paths=N"):
        parse_pe("spd:4:paths=x")
    out = apply_many(t, random_graphs(3, 4))
    assert all(hasattr(d, "lap_eigvec") and hasattr(d, "rw_pe") and hasattr(d, "spd") for d in out)


def test_spd_spec_sets_the_path_length():
    # 'spd:N' keeps paths of up to N edges (a Graphormer with max_hops N reads them all); ':paths=P' overrides it.
    spd = parse_pe("spd:20")
    assert isinstance(spd, ShortestPathDistance) and (spd.max_distance, spd.max_path) == (20, 20)
    short = parse_pe("spd:20:paths=5")
    assert (short.max_distance, short.max_path) == (20, 5)
    both = parse_pe("rw:3,spd:8:paths=0")
    assert (both.transforms[1].max_distance, both.transforms[1].max_path) == (8, 0)
    path10 = spd(graph([(i, i + 1) for i in range(9)], 10))  # edge i is (i, i + 1)
    assert path10.spd_path[9].tolist() == list(range(9)) + [-1] * 11  # pair (0, 9): all nine edges


def test_dense_encodings_refuse_graphs_beyond_their_bound_and_compute_the_rest():
    """Issue 49 R1: a 50,000-node chain asked RWPE for an 18.6 GiB dense matrix; LapPE and RWPE now refuse any graph
    beyond MAX_DENSE_NODES before allocating, and a graph at the inputs' default bound is computed as before."""
    from gea_graph.transforms import MAX_DENSE_NODES

    def chain(n: int) -> Data:
        src = torch.arange(n - 1)
        return Data(edge_index=torch.stack([torch.cat([src, src + 1]), torch.cat([src + 1, src])]), num_nodes=n)

    for transform in (RWPE(16), LapPE(4)):
        with pytest.raises(ValueError, match=rf"a graph of 50,000 nodes is beyond the {MAX_DENSE_NODES:,}"):
            transform(chain(50_000))
    big = RWPE(4)(chain(1_000))  # the default bound of the inputs (SizeBounds().max_nodes)
    assert big.rw_pe.shape == (1_000, 4) and torch.allclose(big.rw_pe[500], torch.tensor([0.0, 0.5, 0.0, 0.375]))


def _relabel(data, perm):
    """The same graph with node ``i`` = node ``perm[i]`` of ``data``."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return Data(edge_index=inv[data.edge_index], num_nodes=data.num_nodes)


def test_rwpe_permutation_equivariant_and_independent_of_the_graphs_computed_with_it():
    graphs = random_graphs(2, count=6)
    together = RWPE(5).forward_many([g.clone() for g in graphs])
    for g, d in zip(graphs, together):
        assert torch.equal(RWPE(5)(g.clone()).rw_pe, d.rw_pe)
        perm = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(g.num_nodes))
        torch.testing.assert_close(RWPE(5)(_relabel(g, perm)).rw_pe, d.rw_pe[perm], rtol=0, atol=1e-6)


@pytest.mark.parametrize("normalization", ["sym", None])
def test_lap_pe_permutation_equivariant(normalization):
    """Relabelling the nodes permutes the rows of every eigenspace's projector and keeps the eigenvalues (the vectors
    themselves are fixed only up to sign and, in a repeated eigenvalue, basis)."""
    k = 4
    # a path 0-1-2-3-4 plus a triangle 5-6-7: two components, repeated eigenvalues in the triangle
    g = graph([(0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7), (7, 5)], 8)
    perm = torch.tensor([6, 2, 0, 7, 4, 1, 5, 3])
    d = LapPE(k, normalization)(g.clone())
    dp = LapPE(k, normalization)(_relabel(g, perm))
    assert torch.equal(dp.lap_mask, d.lap_mask[perm])
    torch.testing.assert_close(dp.lap_eigval, d.lap_eigval, rtol=0, atol=1e-5)
    val = d.lap_eigval[0].double().numpy()
    vec, vec_p = d.lap_eigvec.double().numpy(), dp.lap_eigvec.double().numpy()
    full = np.linalg.eigvalsh(dense_laplacian(g, normalization))
    compared = 0
    for lam in np.unique(np.round(val, 5)):
        cols = np.abs(val - lam) < 1e-5
        if cols.sum() != (np.abs(full - lam) < 1e-5).sum():  # an eigenspace cut by the k limit: no projector
            continue
        proj = vec[:, cols] @ vec[:, cols].T
        np.testing.assert_allclose(vec_p[:, cols] @ vec_p[:, cols].T, proj[perm][:, perm], atol=1e-5)
        compared += int(cols.sum())
    assert compared >= 3
