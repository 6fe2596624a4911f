"""Caches that never go stale, temporary files that cannot be hijacked, bounded generation, clear CSV errors."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from gea_graph.cli import main
from gea_graph.data import CacheError, MoleculeCSV, RawFile, TreeNeighbourMatch, cache_key, fetch
from gea_graph.data.base import atomic_torch_save


def write_csv(path, smiles, targets, **extra):
    pd.DataFrame({"smi": smiles, "t": targets, **extra}).to_csv(path, index=False)
    return path


SMILES = ["CCO", "CCN", "CCC", "CCCl", "c1ccccc1", "CC=O", "COC", "CCCC", "c1ccncc1", "CC(=O)O"]


def test_edited_csv_is_read_again(tmp_path, data_root):
    path = write_csv(tmp_path / "m.csv", SMILES, np.arange(10.0))
    first = MoleculeCSV(data_root, path, "smi", "t", split_column=None)
    old = sorted(float(d.y) for d in first)
    write_csv(path, SMILES, np.arange(10.0) + 100.0)  # same path, same options, new targets
    again = MoleculeCSV(data_root, path, "smi", "t")
    assert sorted(float(d.y) for d in again) == [v + 100.0 for v in old]
    assert again.processed_dir != first.processed_dir


def test_planted_symlink_at_a_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "train.pt"
    # the names the writers used to pick: <path>.tmp-<pid> (caches) and .<name>.part-<pid> (raw files)
    os.symlink(victim, f"{target}.tmp-{os.getpid()}")
    atomic_torch_save({"x": torch.ones(2)}, target)
    assert victim.read_text() == "precious"
    assert torch.load(target, weights_only=True)["x"].tolist() == [1.0, 1.0]

    mirror = tmp_path / "mirror" / "m"
    mirror.mkdir(parents=True)
    (mirror / "f.csv").write_text("a\n1\n")
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir()
    os.symlink(victim, raw_dir / f".f.csv.part-{os.getpid()}")
    os.environ["GEA_GRAPH_MIRROR"], saved = str(tmp_path / "mirror"), os.environ.get("GEA_GRAPH_MIRROR")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fetch(RawFile("f.csv", "http://invalid.example/f.csv", None, "m"), raw_dir)
    finally:
        if saved is None:
            del os.environ["GEA_GRAPH_MIRROR"]
        else:
            os.environ["GEA_GRAPH_MIRROR"] = saved
    assert victim.read_text() == "precious" and (raw_dir / "f.csv").read_text() == "a\n1\n"


def test_stale_temporary_files_are_removed_by_the_next_build(tmp_path):
    folder = tmp_path / "tree-r2" / "processed" / cache_key(None, None, "seed=0")
    folder.mkdir(parents=True)
    dead = folder / ".train.pt.tmp-999999999-abc123"  # a killed writer's (no such pid)
    live = folder / f".test.pt.tmp-{os.getppid()}-def456"  # a live writer's: kept
    old_style = folder / "test.pt.tmp-999999998"  # the name earlier versions used
    for path in (dead, live, old_style):
        path.write_bytes(b"x")
    assert len(TreeNeighbourMatch(tmp_path, depth=2)) > 0
    assert not dead.exists() and not old_style.exists() and live.exists()


def test_tree_depth_beyond_the_benchmark_needs_an_explicit_flag(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"2,048,000 graphs of 1,023 nodes.*GiB.*allow_large=True"):
        TreeNeighbourMatch(tmp_path, depth=9)
    assert main(["data", "prepare", "tree", "--depth", "9", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--allow-large" in err and len(err.strip().splitlines()) == 1
    # a command-line user is told the flag, not the Python argument
    assert err.strip().endswith("to build this one anyway pass --allow-large") and "allow_large" not in err
    assert not any(tmp_path.rglob("*.pt"))


def test_duplicate_smiles_across_splits_are_reported(tmp_path, data_root):
    path = write_csv(tmp_path / "d.csv", ["CCO", "CCN", "CCO", "CCC"], [1.0, 2.0, 3.0, 4.0],
                     fold=["train", "val", "test", "train"])
    with pytest.warns(UserWarning, match=r"1 SMILES occur in more than one split.*'CCO'.*train row\(s\) \[0\]"):
        MoleculeCSV(data_root, path, "smi", "t", split_column="fold")


@pytest.mark.parametrize("fractions", [(0.8, 0.3, -0.1), (0.5, 0.2, 0.2), (0.9, 0.1)])
def test_split_fractions_are_checked(tmp_path, data_root, fractions):
    path = write_csv(tmp_path / "m.csv", SMILES, np.arange(10.0))
    with pytest.raises(ValueError, match="split_fractions.*summing to 1"):
        MoleculeCSV(data_root, path, "smi", "t", split_fractions=fractions)


def test_missing_targets_are_nan_and_bad_ones_named(tmp_path, data_root):
    path = tmp_path / "m.csv"
    path.write_text("smi,a,b\nCCO,1,\nCCN,,2\nCCC,3,4\n")
    ds = MoleculeCSV(data_root, path, "smi", ["a", "b"], split_fractions=(1.0, 0.0, 0.0))
    y = torch.cat([d.y for d in ds])
    assert int(torch.isnan(y).sum()) == 2
    path.write_text("smi,a\nCCO,1\nCCN,inf\nCCC,3\n")
    with pytest.raises(ValueError, match=r"m\.csv: target column 'a' is infinite in rows \[1\]"):
        MoleculeCSV(data_root, path, "smi", "a")
    path.write_text("smi,a\nCCO,1\nCCN,2\nCCC,high\n")
    with pytest.raises(ValueError, match=r"m\.csv: target column 'a' has non-numeric values in rows \[2\].*'high'"):
        MoleculeCSV(data_root, path, "smi", "a")


@pytest.mark.parametrize(("text", "message"), [("", "is empty"), ("smi,t\n", "has a header but no rows")])
def test_empty_and_header_only_csv(tmp_path, data_root, text, message):
    path = tmp_path / "e.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"e\.csv {message}"):
        MoleculeCSV(data_root, path, "smi", "t")


@pytest.mark.parametrize("damage", ["zero-byte", "truncated"])
def test_damaged_processed_cache_is_named_with_a_fix(tmp_path, damage):
    TreeNeighbourMatch(tmp_path, depth=2)
    path = tmp_path / "tree-r2" / "processed" / cache_key(None, None, "seed=0") / "train.pt"
    path.write_bytes(b"" if damage == "zero-byte" else path.read_bytes()[:200])
    with pytest.raises(CacheError, match=rf"{path}.*delete .*force_reload=True"):
        TreeNeighbourMatch(tmp_path, depth=2)
    assert len(TreeNeighbourMatch(tmp_path, depth=2, force_reload=True)) > 0  # rebuilt on request
