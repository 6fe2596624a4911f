"""Real datasets built once per test session and shared by the xdist workers (``build_once``, tests/conftest.py)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="session")
def zinc(mirror, build_once) -> dict:
    """The real ZINC-12k (default, Benchmarking-GNNs features) with LapPE-8 and RWPE-20, per split."""
    from gea_graph.data import ZINC

    return build_once("zinc", lambda root: {s: ZINC(root, s, pe="lap:8,rw:20") for s in ("train", "val", "test")})


@pytest.fixture
def write_struct_csv() -> Callable:
    """``write(path, smiles)`` writes a Peptides-struct CSV in LRGB's format with random targets; returns the table."""

    def write(path, smiles):
        from gea_graph.data import PeptidesStructural

        rng = np.random.default_rng(0)
        table = pd.DataFrame({"smiles": smiles, "sequence": ["X"] * len(smiles)})
        for name in PeptidesStructural.target_names:
            table[name] = rng.normal(size=len(smiles))
        table.to_csv(path, compression="gzip")
        return table

    return write


@pytest.fixture
def tiny_struct() -> Callable:
    """``make(root, split)``: PeptidesStructural whose raw files carry no MD5 (tiny test files are not LRGB's)."""
    from gea_graph.data import PeptidesStructural, RawFile

    class TinyStruct(PeptidesStructural):
        csv_file = RawFile(PeptidesStructural.csv_file.name, "http://invalid.example", None, "none")
        split_file = RawFile(PeptidesStructural.split_file.name, "http://invalid.example", None, "none")
        raw_files = (csv_file, split_file)

    def make(root, split="train", **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*no published MD5")
            return TinyStruct(root, split, **kwargs)

    return make
