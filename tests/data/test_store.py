"""The columnar graph store: batches equal PyG's collation, compact dtypes, resumable chunked builds, one
memory-mapped copy shared by processes."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader

from gea_graph.data import GraphLoader, GraphStore, StoreError, build_store
from gea_graph.transforms import ShortestPathDistance, apply_many, parse_pe

REPO = Path(__file__).resolve().parents[2]


def random_graph(rng: np.random.Generator, i: int) -> Data:
    n = int(rng.integers(1, 12))
    e = int(rng.integers(0, 3 * n))
    edge_index = torch.from_numpy(rng.integers(0, n, size=(2, e))).long()
    data = Data(x=torch.from_numpy(rng.integers(0, 120, size=(n, 9))).long(), edge_index=edge_index,
                edge_attr=torch.from_numpy(rng.integers(0, 5, size=(e, 3))).long(),
                y=torch.tensor([float(i)]), rw_pe=torch.from_numpy(rng.normal(size=(n, 4)).astype(np.float32)),
                mask=torch.from_numpy(rng.random(n) < 0.5), node_y=torch.from_numpy(rng.integers(0, 3, n)).long(),
                edge_label_index=torch.from_numpy(rng.integers(0, n, size=(2, 3))).long(),
                smiles=f"graph-{i}-é", num_nodes=n)
    return ShortestPathDistance(max_distance=5, max_path=3)(data)


def graphs(count: int, seed: int = 0) -> list[Data]:
    rng = np.random.default_rng(seed)
    return [random_graph(rng, i) for i in range(count)]


def build(path: Path, data: list[Data], chunk: int = 7, workers: int = 1, make=None) -> GraphStore:
    num_chunks = -(-len(data) // chunk)

    def default(c: int):
        part = data[c * chunk:(c + 1) * chunk]
        return part, np.arange(c * chunk, c * chunk + len(part)), {"chunk": c}

    build_store(path, num_chunks, make or default, plan={"test": len(data)},
                splits=lambda rows, reports, counts: {"all": np.arange(len(rows)), "odd": np.arange(1, len(rows), 2)},
                workers=workers)
    return GraphStore(path)


def assert_same_batch(a: Batch, b: Batch) -> None:
    assert sorted(a.keys()) == sorted(b.keys())
    for key in b.keys():  # noqa: SIM118 (iterating a Data yields pairs)
        if torch.is_tensor(b[key]):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key
    assert a.num_graphs == b.num_graphs and a.num_nodes == b.num_nodes
    assert a._slice_dict.keys() == b._slice_dict.keys()
    for key in b._slice_dict:
        assert torch.equal(a._slice_dict[key], b._slice_dict[key]), key
        inc_a, inc_b = a._inc_dict[key], b._inc_dict[key]
        assert (inc_a is None and inc_b is None) or torch.equal(inc_a, inc_b), key


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[GraphStore, list[Data]]:
    data = graphs(60)
    return build(tmp_path_factory.mktemp("store") / "store", data, workers=2), data


def test_graphs_round_trip_and_batches_equal_pyg_collation(store):
    st, data = store
    assert len(st) == 60
    for i in (0, 17, 59):
        g, ref = st.graph(i), data[i]
        assert sorted(g.keys()) == sorted(ref.keys())
        for key in ref.keys():  # noqa: SIM118
            value = g[key]
            assert (value.dtype == ref[key].dtype and torch.equal(value, ref[key])) if torch.is_tensor(value) \
                else value == ref[key], key
    for index in ([3, 1, 4, 1, 5, 9, 2, 6], list(range(60)), [42]):
        batch = st.batch(index)
        assert_same_batch(batch, Batch.from_data_list([data[i] for i in index]))
        assert batch.get_example(0).smiles == data[index[0]].smiles
        assert len(batch.to_data_list()) == len(index)


def test_columns_use_the_smallest_dtypes_and_spd_index_is_not_stored(store):
    st, _ = store
    kinds = {key: np.dtype(f["store_dtype"]) for key, f in st.fields.items() if f["kind"] == "tensor"}
    assert kinds["x"] == np.uint8 and kinds["edge_attr"] == np.uint8 and kinds["edge_index"] == np.uint8
    assert kinds["spd"] == np.uint8 and kinds["spd_path"] == np.int8  # -1 padding, edge ids < 36
    assert kinds["rw_pe"] == np.float32 and kinds["mask"] == np.bool_
    assert st.columns["edge_index"].shape[1] == 2  # stored [E, 2], graph-local
    assert "spd_index" not in st.fields and st.derived == ["spd_index"]
    assert st.graph(3).spd_index.dtype == torch.long


def test_splits_values_and_bad_requests(store):
    st, data = store
    assert st.split("odd").tolist() == list(range(1, 60, 2))
    torch.testing.assert_close(st.values("y", st.split("odd")), torch.tensor([float(i) for i in range(1, 60, 2)]))
    assert st.values("smiles", [2, 0]) == [data[2].smiles, data[0].smiles]
    with pytest.raises(StoreError, match="no split 'test'.*'all', 'odd'"):
        st.split("test")
    with pytest.raises(KeyError, match="no field 'z'"):
        st.values("z", [0])


def test_a_store_pickles_as_its_path(store):
    st, _ = store
    blob = pickle.dumps(st)
    assert len(blob) < 1000
    again = pickle.loads(blob)
    assert_same_batch(again.batch([5, 6]), st.batch([5, 6]))


def test_stores_over_the_same_files_share_one_mapping(tmp_path):
    """The stores of a dataset's splits map each file once in a process (each mapping counts its resident pages on its
    own); a store rebuilt in place maps its new files; a mapping goes when no store holds it."""
    import gc

    from gea_graph.data import store as store_module

    data = graphs(20)
    a = build(tmp_path / "s", data)
    b = GraphStore(tmp_path / "s")
    assert set(a.columns) == set(b.columns) and "smiles" in a.columns
    for key in a.columns:
        assert a.columns[key] is b.columns[key], key
    assert a.num_nodes is b.num_nodes and a.rows is b.rows and a.ptr["nodes"] is b.ptr["nodes"]
    assert_same_batch(b.batch([3, 4]), Batch.from_data_list([data[3], data[4]]))
    # rebuilt in place (new files, new inodes): the new store reads the new graphs, the old one keeps its own
    import shutil
    shutil.rmtree(tmp_path / "s")
    other = graphs(20, seed=1)
    c = build(tmp_path / "s", other)
    assert c.columns["x"] is not a.columns["x"]
    assert_same_batch(c.batch([3]), Batch.from_data_list([other[3]]))
    assert_same_batch(a.batch([3]), Batch.from_data_list([data[3]]))
    before = len(store_module._MAPPINGS)
    del a, b
    gc.collect()
    assert len(store_module._MAPPINGS) < before


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps (Linux)")
def test_release_mapped_pages_drops_the_store_from_the_resident_set_and_loses_nothing(tmp_path):
    """A run reads rows spread over the store's files; every page it touched stays resident until released.
    Releasing drops them all (the mappings are read-only views of the files) and the rows read the same after."""
    import mmap

    from gea_graph.data.store import release_mapped_pages

    if not hasattr(mmap, "MADV_DONTNEED"):
        pytest.skip("no MADV_DONTNEED on this platform")
    data = graphs(600)
    st = build(tmp_path / "s", data, chunk=300)
    every = np.arange(len(st))
    before = st.batch(every)
    assert _resident_kib_under(tmp_path / "s") > 0  # read once: its pages are resident
    assert release_mapped_pages() >= sum(a.nbytes for a in st.columns.values())
    assert _resident_kib_under(tmp_path / "s") == 0
    assert_same_batch(st.batch(every), before)  # read again from the page cache, unchanged
    assert_same_batch(st.batch([3, 599]), Batch.from_data_list([data[3], data[599]]))


def test_graph_loader_gives_pyg_batches_with_and_without_workers(store, tmp_path):
    st, data = store

    class View:  # the store as a dataset: what GraphLoader needs is batch(indices) and len
        def __len__(self):
            return len(st)

        def __getitem__(self, i):
            return st.graph(i)

        def batch(self, index):
            return st.batch(index)

        def packed_batch(self, index):
            return st.packed_batch(index)

    expected = list(DataLoader(data, batch_size=16))
    for workers in (0, 2):
        got = list(GraphLoader(View(), batch_size=16, num_workers=workers))
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert_same_batch(a, b)
    with pytest.raises(TypeError, match="batch\\(indices\\)"):
        GraphLoader(data, batch_size=4)


def test_graphs_with_different_fields_are_refused(tmp_path):
    data = graphs(4)
    del data[2].rw_pe
    with pytest.raises(StoreError, match="graph 2 has the fields"):
        build(tmp_path / "s", data, chunk=10)


def test_missing_or_foreign_store_is_a_clear_error(store, tmp_path):
    with pytest.raises(StoreError, match="cannot read the store"):
        GraphStore(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(StoreError, match="format 99"):
        GraphStore(tmp_path)


def test_a_damaged_column_is_a_clear_error(tmp_path):
    st = build(tmp_path / "s", graphs(10))
    column = Path(st.path) / "spd.npy"
    data = column.read_bytes()
    column.write_bytes(data[:-50])  # truncated
    with pytest.raises(StoreError, match="incomplete|damaged"):
        GraphStore(st.path)
    np.save(column, np.zeros(3, np.uint8))  # a readable column of the wrong length
    with pytest.raises(StoreError, match="damaged.*spd has 3 rows"):
        GraphStore(st.path)


def test_a_failed_build_resumes_from_its_finished_chunks(tmp_path):
    data = graphs(30, seed=1)
    calls = []

    def flaky(c):
        calls.append(c)
        if c == 2:
            raise RuntimeError("killed")
        return data[c * 7:(c + 1) * 7], np.arange(c * 7, min(30, (c + 1) * 7)), {}

    with pytest.raises(RuntimeError, match="killed"):
        build(tmp_path / "s", data, make=flaky)
    assert not (tmp_path / "s").exists()  # no store that looks complete
    assert sorted(p.name for p in (tmp_path / "s.chunks").glob("*.npz")) == ["000000.npz", "000001.npz"]
    calls.clear()
    st = build(tmp_path / "s", data, make=lambda c: flaky(c) if c != 2 else (
        data[14:21], np.arange(14, 21), {}))
    assert calls == [3, 4]  # chunks 0 and 1 were not redone (chunk 2 came from the replacement)
    assert not (tmp_path / "s.chunks").exists()
    assert_same_batch(st.batch(range(30)), Batch.from_data_list(data))


def test_a_different_plan_does_not_reuse_chunks(tmp_path):
    data = graphs(14)
    build(tmp_path / "s", data)
    (tmp_path / "s.chunks").mkdir()
    (tmp_path / "s.chunks" / "plan.json").write_text(json.dumps({"test": 1}))
    (tmp_path / "s.chunks" / "000000.npz").write_bytes(b"stale")
    st = build(tmp_path / "s", data)  # the stale chunk of another plan is not read
    assert_same_batch(st.batch(range(14)), Batch.from_data_list(data))


KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_store import graphs
    from gea_graph.data import build_store
    data = graphs(40)
    def slow(c):
        if c >= 2:
            time.sleep(30)  # killed here
        return data[c * 10:(c + 1) * 10], np.arange(c * 10, (c + 1) * 10), {{}}
    build_store(sys.argv[1], 4, slow, plan={{"test": 40}}, splits=lambda r, *_: {{"all": np.arange(len(r))}},
                workers=1)
""")


def test_a_killed_build_process_leaves_no_store_and_resumes(tmp_path):
    path = tmp_path / "s"
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, str(script), str(path)], env=env)
    deadline = time.time() + 120
    while len(list((tmp_path / "s.chunks").glob("*.npz"))) < 2 and time.time() < deadline:
        assert proc.poll() is None, "the build ended before it could be killed"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not path.exists()
    done = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "s.chunks").glob("*.npz")}
    assert sorted(done) == ["000000.npz", "000001.npz"]
    data = graphs(40)
    calls = []

    def fast(c):
        calls.append(c)
        return data[c * 10:(c + 1) * 10], np.arange(c * 10, (c + 1) * 10), {}

    build_store(path, 4, fast, plan={"test": 40}, splits=lambda r, *_: {"all": np.arange(len(r))}, workers=1)
    assert calls == [2, 3]
    assert_same_batch(GraphStore(path).batch(range(40)), Batch.from_data_list(data))


READER = textwrap.dedent("""
    import sys
    import numpy as np
    from gea_graph.data import GraphStore
    st = GraphStore(sys.argv[1])
    total = sum(int(np.asarray(c).view(np.uint8).sum() % 7) for c in st.columns.values())  # touch every page
    print("ready", flush=True)
    sys.stdin.readline()
""")


def _smaps_kb(pid: int | str, fields: tuple[str, ...], is_file: Callable[[str], bool]) -> int:
    """The sum of :obj:`fields` (KiB) of ``/proc/<pid>/smaps`` over the mappings whose file (the rest of the header
    line after the inode) satisfies :obj:`is_file`."""
    total, inside = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if line[:1] in "0123456789abcdef" and "-" in line.split()[0]:  # a mapping's header line
            parts = line.split(maxsplit=5)
            inside = len(parts) == 6 and is_file(parts[5].rstrip())
        elif inside and line.startswith(fields):
            total += int(line.split()[1])
    return total


def _shared_kb(pid: int, name: str) -> int:
    """Shared_Clean + Shared_Dirty (pages also mapped by another process; dirty while a fresh file is not yet written
    back) of the mappings of file :obj:`name` in :obj:`pid`."""
    return _smaps_kb(pid, ("Shared_Clean:", "Shared_Dirty:"), lambda file: file.endswith(name))


def _resident_kib_under(folder: Path) -> int:
    """Resident KiB of this process's mappings of files under :obj:`folder`."""
    return _smaps_kb("self", ("Rss:",), lambda file: file.startswith(f"{folder}{os.sep}"))


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_two_processes_read_one_memory_mapped_copy(tmp_path):
    big = [ShortestPathDistance(max_distance=30, max_path=8)(Data(
        edge_index=torch.stack([torch.arange(59), torch.arange(1, 60)]), num_nodes=60)) for _ in range(200)]
    st = build(tmp_path / "s", big, chunk=100)
    column = Path(st.path) / st.fields["spd_path"]["file"]
    size_kb = column.stat().st_size // 1024
    assert size_kb > 2000
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    readers = [subprocess.Popen([sys.executable, "-c", READER, st.path], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    try:
        for proc in readers:
            assert proc.stdout.readline().strip() == "ready"
        for proc in readers:
            # every page of the column is in both processes and counted as shared: one copy, not two
            assert _shared_kb(proc.pid, column.name) >= 0.9 * size_kb
    finally:
        for proc in readers:
            proc.communicate("\n", timeout=60)


# -- molecules: the columnar build path and a killed dataset build ----------------------------------------------------
@pytest.fixture(scope="module")
def pcqm_sample(mirror) -> tuple[list[str], np.ndarray]:
    import pandas as pd
    from rdkit import Chem

    table = pd.read_csv(mirror / "pcqm4mv2-sample" / "pcqm4mv2-2k.csv")
    smiles = [Chem.MolToSmiles(Chem.RemoveHs(Chem.MolFromSmiles(s))) for s in table["smiles"][:600]]
    return smiles + ["not a smiles"], np.append(table["homo"].to_numpy(np.float32)[:600], np.nan)[:, None]


@pytest.mark.parametrize("features", ["ogb", "bench"])
@pytest.mark.parametrize("paths", [None, ShortestPathDistance(max_distance=20, max_path=5),
                                   parse_pe("lap:4:pad=nan,rw:6"), parse_pe("rw:3,spd:4")])
def test_molecule_columns_equal_the_graph_path(pcqm_sample, features, paths):
    from gea_graph.data.featurizers import molecule_columns, molecule_graphs
    from gea_graph.data.store import graphs_to_columns

    smiles, targets = pcqm_sample
    if features == "bench":  # ZINC's vocabulary: only molecules inside it
        smiles, targets = ["CC(=O)[O-]", "c1ccc2[nH]ccc2c1", "C[NH3+]", "x"], np.zeros((4, 2), np.float32)
    rows = np.arange(len(smiles))
    columns, kept, bad = molecule_columns(smiles, targets, rows, features, paths)
    graphs, kept_ref, bad_ref = molecule_graphs(smiles, targets, rows, features)
    reference = graphs_to_columns(apply_many(paths, graphs))
    assert np.array_equal(kept, kept_ref) and bad == bad_ref and bad[0][1] in ("not a smiles", "x")
    assert columns.fields == reference.fields
    assert columns.arrays.keys() == reference.arrays.keys()
    for key, value in reference.arrays.items():
        assert np.array_equal(columns.arrays[key], value, equal_nan=value.dtype.kind == "f"), key


def test_a_killed_pcqm4mv2_build_resumes_from_its_chunks(tmp_path, pcqm_sample, monkeypatch):
    import pandas as pd

    import gea_graph.data.store as store_module
    from gea_graph.data import PCQM4Mv2

    smiles, _ = pcqm_sample
    folder = tmp_path / "pcqm4m-v2"
    (folder / "raw").mkdir(parents=True)
    n = 600
    gap = np.arange(n, dtype=float)
    pd.DataFrame({"idx": np.arange(n), "smiles": smiles[:n], "homolumogap": gap}).to_csv(
        folder / "raw" / "data.csv.gz", index=False, compression="gzip")
    split = {"train": np.arange(0, 500), "valid": np.arange(500, 550), "test-dev": np.arange(550, 575),
             "test-challenge": np.arange(575, 600)}
    torch.save(split, folder / "split_dict.pt")
    script = textwrap.dedent("""
        import sys, time
        import gea_graph.data.store as store
        original = store._write_chunk
        def slow(chunk_dir, index):
            if index >= 3:
                time.sleep(60)  # killed here
            return original(chunk_dir, index)
        store._write_chunk = slow
        from gea_graph.data import PCQM4Mv2
        PCQM4Mv2(sys.argv[1], "train", pe="spd:20:paths=5")
    """)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "GEA_GRAPH_CHUNK_ROWS": "100", "GEA_GRAPH_WORKERS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=env)
    chunks = lambda: sorted(p.name for p in tmp_path.rglob("store.chunks/*.npz"))
    deadline = time.time() + 120
    while len(chunks()) < 3 and time.time() < deadline:
        assert proc.poll() is None, "the build ended before it could be killed"
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert chunks() == ["000000.npz", "000001.npz", "000002.npz"]
    assert not list(tmp_path.rglob("store/meta.json"))  # nothing that looks like a finished dataset
    done = []
    original = store_module._write_chunk
    monkeypatch.setattr(store_module, "_write_chunk", lambda d, i: done.append(i) or original(d, i))
    monkeypatch.setenv("GEA_GRAPH_CHUNK_ROWS", "100")
    monkeypatch.setenv("GEA_GRAPH_WORKERS", "1")
    resumed = PCQM4Mv2(tmp_path, "train", pe="spd:20:paths=5")
    assert done == [3, 4, 5]
    assert not list(tmp_path.rglob("*.tmp-*")) and not list(tmp_path.rglob("store.chunks"))
    assert len(resumed) == 500 - sum(1 for s in smiles[:500] if s == "not a smiles")
    assert torch.equal(resumed.y, torch.arange(500, dtype=torch.float32))
    reference = ShortestPathDistance(20, 5)(resumed.get(7).clone())
    assert torch.equal(resumed[7].spd_path, reference.spd_path)


def test_subsets_of_a_dataset_batch_through_their_indices(tmp_path):
    from gea_graph.data import MoleculeCSV

    csv = tmp_path / "m.csv"
    csv.write_text("smiles,t\n" + "".join(f"{'C' * (i + 1)}O,{i}\n" for i in range(40)))
    ds = MoleculeCSV(tmp_path, csv, "smiles", "t", split="train", pe="spd:4")
    sub = ds[torch.tensor([5, 3, 20, 7])][1:3]
    assert_same_batch(sub.batch([1, 0]), Batch.from_data_list([ds[20], ds[3]]))
    assert torch.equal(sub.y, torch.stack([ds[3].y, ds[20].y]).view(-1))
    again = pickle.loads(pickle.dumps(sub))  # a pickled subset maps the store again and keeps its indices
    assert_same_batch(again.batch([0, 1]), sub.batch([0, 1]))


def test_default_chunks_give_every_worker_several_and_the_same_store(tmp_path, monkeypatch):
    # Peptides-func's 15,535 rows made 2 chunks of at most 10,000 rows: 2 of 16 cores busy on a GPU machine (58 s),
    # and one worker with 10,000 rows while the other idled on 2 cores. Chunks now give each worker about four.
    import gea_graph.data.molecules as molecules_module
    import gea_graph.data.store as store_module
    from gea_graph.data import MoleculeCSV
    from gea_graph.data.store import MIN_CHUNK_ROWS, chunk_rows_for

    assert chunk_rows_for(15_535, 10_000, workers=2) == 1942  # 8 chunks
    assert chunk_rows_for(15_535, 10_000, workers=16) == MIN_CHUNK_ROWS  # 16 chunks, not 64 tiny ones
    assert chunk_rows_for(3_746_620, 10_000, workers=16) == 10_000  # a worker's memory stays bounded
    assert chunk_rows_for(0, 10_000, workers=4) == MIN_CHUNK_ROWS and chunk_rows_for(10, 5, workers=1) == 5
    monkeypatch.setenv("GEA_GRAPH_WORKERS", "1")
    assert chunk_rows_for(15_535, 10_000) == 3884

    csv = tmp_path / "m.csv"
    csv.write_text("smiles,t\n" + "".join(f"{'C' * (i % 7 + 1)}N{'C' * (i // 7)}O,{i}\n" for i in range(90)))
    builds = []
    original = molecules_module.build_store
    monkeypatch.setattr(molecules_module, "build_store",
                        lambda path, num_chunks, *a, **k:
                        builds.append(num_chunks) or original(path, num_chunks, *a, **k))
    monkeypatch.setattr(store_module, "MIN_CHUNK_ROWS", 10)
    monkeypatch.setenv("GEA_GRAPH_WORKERS", "2")  # 90 rows / (4 x 2 workers): chunks of 12 rows, in 2 processes
    default = MoleculeCSV(tmp_path / "default", csv, "smiles", "t", split="train", pe="rw:4")
    monkeypatch.setenv("GEA_GRAPH_CHUNK_ROWS", "1000")
    whole = MoleculeCSV(tmp_path / "whole", csv, "smiles", "t", split="train", pe="rw:4")
    assert builds == [8, 1] and len(default) == len(whole) > 0
    assert_same_batch(default.batch(list(range(len(default)))), whole.batch(list(range(len(whole)))))


def test_build_workers_follow_the_cpus_this_process_may_use(monkeypatch):
    # under Slurm or taskset a job may use fewer CPUs than the machine has: forking one worker per machine CPU would
    # oversubscribe the job's few
    from gea_graph.data.store import build_workers

    monkeypatch.delenv("GEA_GRAPH_WORKERS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert build_workers() == 3
    monkeypatch.setenv("GEA_GRAPH_WORKERS", "5")
    assert build_workers() == 5
