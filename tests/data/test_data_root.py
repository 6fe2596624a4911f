"""Issue 23 for data roots: a second builder waits for the first and reuses its result (D8), a store's meta.json
cannot point a column at another file (D13), stores follow the umask (D12), and CSVs with duplicate column names
(D11) or in Latin-1 are one clear line."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gea_graph.cli import main
from gea_graph.data import CacheError, MoleculeCSV, TreeNeighbourMatch
from gea_graph.io import build_lock

REPO = Path(__file__).resolve().parents[2]
SMILES = ["CCO", "CCN", "CCC", "CCCl", "c1ccccc1", "CC=O", "COC", "CCCC", "c1ccncc1", "CC(=O)O"]


def molecules(path: Path, **columns) -> Path:
    pd.DataFrame({"smi": SMILES, "t": np.arange(10.0), **columns}).to_csv(path, index=False)
    return path


def test_a_second_builder_waits_for_the_first_and_reuses_its_store(tmp_path):
    root = tmp_path / "datasets"
    folder = root / "tree-r2"
    with build_lock(folder):  # this process builds tree-r2; a second one is started meanwhile
        other = subprocess.Popen(
            [sys.executable, "-m", "gea_graph", "data", "prepare", "tree-r2", "--root", str(root)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        waiting = []
        reader = threading.Thread(target=lambda: waiting.append(next(
            (line for line in other.stderr if "is being built by" in line), "")))
        reader.start()
        reader.join(timeout=600)  # a bound for a broken lock only: the line comes before the other one blocks
        assert waiting and f"tree-r2 in {root} is being built by pid {os.getpid()} on " in waiting[0], waiting
        assert "waiting for it to finish" in waiting[0]
        built = TreeNeighbourMatch(root, depth=2)  # the first build, while the second process waits
        stamp = os.stat(Path(built.processed_dir) / "train.pt")
    out, err = other.communicate(timeout=600)
    assert other.returncode == 0, err
    assert "76 graphs" in out  # the waiting process read the store built meanwhile ...
    after = os.stat(Path(built.processed_dir) / "train.pt")
    assert (after.st_ino, after.st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns)  # ... and did not rebuild it
    with build_lock(folder), build_lock(folder):  # re-entrant within a process; free once the holder is done
        assert len(TreeNeighbourMatch(root, depth=2, force_reload=True)) == 76


@pytest.fixture
def store_dir(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "datasets"
    ds = MoleculeCSV(root, molecules(tmp_path / "m.csv"), "smi", "t")
    return root, Path(ds.store_dir)


@pytest.mark.parametrize("plant", ["absolute file", "parent file", "other name", "linked column", "offsets",
                                   "split"])
def test_a_planted_meta_json_cannot_read_another_file(tmp_path, store_dir, plant):
    root, store = store_dir
    secret = tmp_path / "secret.npy"
    np.save(secret, np.arange(1000, dtype=np.int64))
    meta = json.loads((store / "meta.json").read_text())
    field = meta["fields"]["y"]
    if plant == "absolute file":
        field["file"] = str(secret)
    elif plant == "parent file":
        field["file"] = "../../../../secret.npy"
    elif plant == "other name":
        field["file"] = "rows.npy"
    elif plant == "linked column":
        (store / "y.npy").unlink()
        (store / "y.npy").symlink_to(secret)
    elif plant == "offsets":
        ptr = np.load(store / "ptr.graphs.npy")
        np.save(store / "ptr.graphs.npy", ptr - 3)  # negative offsets would wrap around the column
    else:
        np.save(store / "split.train.npy", np.array([0, 10 ** 6], dtype=np.int64))
    (store / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CacheError, match="delete that folder to rebuild it"):
        MoleculeCSV(root, tmp_path / "m.csv", "smi", "t")
    # the guarded feature: rebuilt, the store reads again
    again = MoleculeCSV(root, tmp_path / "m.csv", "smi", "t", force_reload=True)
    assert sorted(float(d.y) for d in again) == sorted(float(v) for v in np.arange(10.0)[again.positions.tolist()])


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_stores_and_caches_get_the_permissions_of_the_umask(tmp_path, umask):
    before = os.umask(umask)
    try:
        MoleculeCSV(tmp_path / "datasets", molecules(tmp_path / "m.csv"), "smi", "t")
        TreeNeighbourMatch(tmp_path / "datasets", depth=2)
    finally:
        os.umask(before)
    made = [p for p in (tmp_path / "datasets").rglob("*")]
    assert len(made) > 15
    want = {p: (0o777 if p.is_dir() else 0o666) & ~umask for p in made}
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in made} == want


def test_duplicate_column_names_and_latin1_are_one_line(tmp_path, capsys):
    dup = tmp_path / "dup.csv"
    dup.write_text("smiles,y,y\nCCO,1,5\nCCN,2,6\nCCC,3,7\n")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("smiles,y\nCCO,1\nCCN,2\n# café\n".encode("latin-1"))
    fine = tmp_path / "fine.csv"
    fine.write_text("smiles,y,z\n" + "".join(f"{s},{i},{-i}\n" for i, s in enumerate(SMILES)))
    expected = {dup: "names the column(s) ['y'] more than once in its header ['smiles', 'y', 'y']",
                latin: "is not UTF-8 text (byte 0xe9 on line 4); save it as UTF-8", fine: None}
    for csv_path, message in expected.items():
        recipe = tmp_path / f"{csv_path.stem}-recipe.yaml"
        recipe.write_text(yaml.safe_dump({
            "data": {"csv": str(csv_path), "root": str(tmp_path / "data"),
                     "options": {"smiles_column": "smiles", "target_columns": "y"}},
            "model": {"family": "mpnn", "mpnn": "gin", "task": "graph_regression", "out_channels": 1, "hidden": 8,
                      "layers": 1}, "trainer": {"max_epochs": 1, "seeds": [0], "batch_size": 4}}))
        code = main(["train", str(recipe), "--out", str(tmp_path / f"run-{csv_path.stem}"), "--accelerator", "cpu",
                     "--no-progress"])
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gea-graph train: error")]
        if message is None:  # the guarded feature: a CSV with unique columns trains
            assert code == 0 and not err
        else:
            assert code == 2 and len(err) == 1 and str(csv_path) in err[0] and message in err[0], err
