"""A PCQM4Mv2 replica in OGB's raw layout and OGB's own processing of it (:mod:`gea_graph.bench.replica`, front ends
``scripts/make_pcqm4mv2_replica.py`` and ``scripts/ogb_pcqm4mv2_process.py``), and the measurement of a build (wall
time, tree PSS, peak RSS, disk, exit status: :mod:`gea_graph.bench.measure`, front end ``scripts/measure_build.py``)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gea_graph.bench import measure as measure_build
from gea_graph.bench import replica

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def replica_script():
    """The package module, its ``read_sample`` cached while this test module runs (RDKit converts the 2k sample
    once)."""
    original = replica.read_sample
    replica.read_sample = functools.lru_cache(original)
    yield replica
    replica.read_sample = original


@pytest.fixture(scope="module")
def sample(mirror, replica_script):
    """Heavy-atom SMILES and gaps of the mirrored sample, as the replica repeats them."""
    smiles, gaps = replica_script.read_sample(replica_script.default_sample(), True)
    return smiles, np.array(gaps, dtype=float)


@pytest.fixture(scope="module")
def replica_2500(mirror, replica_script, tmp_path_factory):
    root = tmp_path_factory.mktemp("replica-2500")
    return root, replica_script.make_replica(root, rows=2500)


# -- make_pcqm4mv2_replica ---------------------------------------------------------------------------------------


def test_split_sizes_are_ogbs_scaled(replica_script):
    assert replica_script.split_sizes(3_746_620) == {"train": 3_378_606, "valid": 73_545, "test-dev": 147_037,
                                              "test-challenge": 147_432}
    for rows in (4, 5, 17, 300, 2500, 123_457):
        sizes = replica_script.split_sizes(rows)
        assert sum(sizes.values()) == rows and min(sizes.values()) >= 1
        if rows >= 300:  # largest remainder: each within one row of its exact share
            for name, size in sizes.items():
                assert abs(size - rows * replica_script.OGB_SPLIT_SIZES[name] / 3_746_620) < 1
    with pytest.raises(ValueError, match="at least 4.*got 3"):
        replica_script.split_sizes(3)


def test_replica_layout_rows_splits_and_nan_targets(replica_script, replica_2500, sample):
    root, summary = replica_2500
    folder = root / "pcqm4m-v2"
    # Only the final names: no temporary file is left behind (processed/ is our loader's, when its test ran first).
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if not p.relative_to(folder).as_posix().startswith("processed")) == [
        "RELEASE_v1.txt", "raw", "raw/data.csv.gz", "split_dict.pt"]
    assert summary["files"][str(folder / "raw" / "data.csv.gz")] == (folder / "raw" / "data.csv.gz").stat().st_size

    table = pd.read_csv(folder / "raw" / "data.csv.gz")
    assert list(table.columns) == ["idx", "smiles", "homolumogap"] and len(table) == 2500
    np.testing.assert_array_equal(table["idx"], np.arange(2500))
    smiles, gaps = sample
    cycle = np.arange(2500) % len(smiles)
    assert table["smiles"].tolist() == [smiles[i] for i in cycle]

    split = torch.load(folder / "split_dict.pt", weights_only=False)  # our own file: numpy arrays, as OGB's
    assert list(split) == ["train", "valid", "test-dev", "test-challenge"]
    assert all(isinstance(v, np.ndarray) and v.dtype == np.int64 for v in split.values())
    sizes = {name: len(index) for name, index in split.items()}
    assert sizes == summary["splits"] == replica_script.split_sizes(2500)
    np.testing.assert_array_equal(np.sort(np.concatenate(list(split.values()))), np.arange(2500))
    test_rows = np.concatenate([split["test-dev"], split["test-challenge"]])
    nan = table["homolumogap"].isna().to_numpy()
    assert nan.sum() == len(test_rows) and nan[test_rows].all()
    labelled = ~nan
    np.testing.assert_allclose(table["homolumogap"][labelled], gaps[cycle[labelled]])
    assert "replica" in (folder / "RELEASE_v1.txt").read_text()


def test_our_loader_reads_the_replica(replica_2500, sample):
    from gea_graph.data import PCQM4Mv2

    root, summary = replica_2500
    val = PCQM4Mv2(root, "val")
    assert len(val) == summary["splits"]["valid"]
    row = summary["splits"]["train"]  # the first validation row
    smiles, gaps = sample
    graph = val[0]
    assert graph.smiles == smiles[row % len(smiles)] and graph.x.shape[1] == 9 and graph.edge_attr.shape[1] == 3
    assert graph.y.item() == pytest.approx(gaps[row % len(smiles)], rel=1e-6)


def test_replica_refuses_bad_rows_and_stale_caches(replica_script, tmp_path):
    script = _load("make_pcqm4mv2_replica")
    with pytest.raises(SystemExit, match="rows must be at least 4.*got 2"):
        script.main([str(tmp_path), "--rows", "2"])
    (tmp_path / "pcqm4m-v2" / "processed").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="processed exists"):
        replica_script.make_replica(tmp_path, rows=10)
    with pytest.raises(SystemExit, match="no PCQM4Mv2 sample at"):
        script.main([str(tmp_path / "other"), "--rows", "10", "--sample", str(tmp_path / "missing.csv")])


def test_ogb_processes_the_replica_as_we_do(mirror, replica_script, tmp_path):
    pytest.importorskip("ogb")
    from gea_graph.data import PCQM4Mv2

    summary = replica_script.make_replica(tmp_path, rows=300)
    ogb, split = replica_script.ogb_pcqm4mv2(tmp_path)
    assert len(ogb) == 300
    assert {name: len(index) for name, index in split.items()} == summary["splits"]
    assert torch.isnan(ogb.y[split["test-dev"]]).all() and not torch.isnan(ogb.y[split["valid"]]).any()
    for ours_split, ogb_split in (("val", "valid"), ("test-challenge", "test-challenge")):
        ours = PCQM4Mv2(tmp_path, ours_split)
        for k, row in enumerate(split[ogb_split].tolist()):
            for key in ("x", "edge_index", "edge_attr"):
                assert torch.equal(ours[k][key], ogb[row][key]), (ours_split, k, key)


def test_ogb_script_front_end(mirror, replica_script, tmp_path, capsys):
    pytest.importorskip("ogb")
    replica_script.make_replica(tmp_path, rows=40)
    _load("ogb_pcqm4mv2_process").main([str(tmp_path)])
    assert "OGB PygPCQM4Mv2Dataset: 40 graphs (train " in capsys.readouterr().out
    assert (tmp_path / "pcqm4m-v2" / "processed" / "geometric_data_processed.pt").is_file()


# -- measure_build -----------------------------------------------------------------------------------------------

# A parent and its child each hold 120 MiB of written (so resident, unshared) pages for a while; the parent writes a
# file of 12,345 bytes and exits with status 3.
TREE = """
import subprocess, sys, time
held = b"p" * (120 << 20)
child = subprocess.Popen([sys.executable, "-c", "import time; held = b'c' * (120 << 20); time.sleep(1.0)"])
open(sys.argv[1], "wb").write(b"z" * 12345)
child.wait()
sys.exit(3)
"""


def test_measure_build_sums_the_tree_and_propagates_the_exit_status(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    record = tmp_path / "runs.jsonl"
    cmd = [sys.executable, str(SCRIPTS / "measure_build.py"), "--label", "tree", "--disk", str(out),
           "--json", str(record), "--interval", "0.05", "--", sys.executable, "-c", TREE, str(out / "f.bin")]
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stderr
    assert "[tree] peak_pss_bytes" in run.stdout and "[tree] exit_status 3" in run.stdout
    result = json.loads(record.read_text())
    assert result["exit_status"] == 3 and result["label"] == "tree" and result["wall_s"] > 0
    # Both processes' 120 MiB at once: more than either alone.
    assert result["peak_pss_bytes"] >= 200e6 and result["peak_processes"] == 2
    assert 120 << 20 <= result["peak_rss_bytes"] < result["peak_pss_bytes"]
    assert result["disk_bytes"] == 12345

    subprocess.run(cmd[:-4] + ["true"], check=True, capture_output=True)  # appended: a second JSON line
    assert [json.loads(line)["exit_status"] for line in record.read_text().splitlines()] == [3, 0]


def test_measure_build_counts_disk_and_kills(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x").write_bytes(b"1" * 10)
    (tmp_path / "a" / "b" / "y").write_bytes(b"2" * 5)
    assert measure_build.disk_usage(tmp_path / "a") == 15
    assert measure_build.disk_usage(tmp_path / "a" / "x") == 10
    assert measure_build.disk_usage(tmp_path / "missing") == 0
    killed = measure_build.measure("k", [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"],
                                   tmp_path / "a")
    assert killed.exit_status == -9 and killed.disk_bytes == 15
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        measure_build.measure("k", ["true"], tmp_path, interval=0)


def test_measure_leaves_out_children_started_before(tmp_path):
    # A child of this process holding 100 MiB is not part of the measured command's tree.
    holder = subprocess.Popen([sys.executable, "-c", "import time; held = b'h' * (100 << 20); time.sleep(30)"])
    try:
        result = measure_build.measure("alone", ["sleep", "0.3"], tmp_path, interval=0.05)
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_status == 0 and result.peak_processes == 1
    assert result.peak_pss_bytes < 50e6


def test_measure_counts_the_command_not_the_size_of_the_process_that_started_it(tmp_path):
    # Linux carries ru_maxrss over from the parent across fork and exec: `sleep` started by a process of 512 MiB
    # reports 512 MiB in wait4's ru_maxrss. Its own peak is a few MiB.
    ballast = b"b" * (512 << 20)
    try:
        result = measure_build.measure("small", ["sleep", "0.3"], tmp_path, interval=0.05)
    finally:
        del ballast
    assert result.exit_status == 0 and 0 < result.peak_rss_bytes < 50e6


def test_a_child_not_yet_exec_is_not_sampled():
    # Caught between fork and exec, the command is still a copy of this process (its VmHWM, its command line).
    ballast = b"b" * (256 << 20)
    pid = os.fork()
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            mine = f.read()
        assert measure_build.sample([pid])[1] >= len(ballast)
        assert measure_build.sample([pid], not_yet_exec=mine) == (0, 0, 0)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        del ballast
