"""Real datasets built once per test session and shared by the xdist workers (a file lock makes one build them)."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Callable

import pytest


@pytest.fixture(scope="session")
def shared_data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The parent of the per-worker base temp is common to all xdist workers of this run.
    root = tmp_path_factory.getbasetemp().parent / "gea-graph-shared-datasets"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="session")
def build_once(shared_data_root: Path) -> Callable:
    """``build_once(factory)`` runs ``factory(root)`` under a lock on the shared root: the first worker builds the
    processed cache, the others then just load it."""

    def run(factory: Callable):
        with open(shared_data_root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return factory(shared_data_root)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    return run
