"""Fixtures of the data tests (the real datasets shared by all tests are in ``tests/conftest.py``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest


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
