"""Shared test fixtures (keep generic: several test packages use this file)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest

_DEFAULT_MIRROR = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# Point the loaders at the offline mirror beside the checkout when the environment does not name one.
if not os.environ.get("GEA_GRAPH_MIRROR") and _DEFAULT_MIRROR.is_dir():
    os.environ["GEA_GRAPH_MIRROR"] = str(_DEFAULT_MIRROR)


def _shared_root(factory: pytest.TempPathFactory) -> Path:
    # the parent of the per-worker base temp under xdist (common to the workers of one session), else the base temp
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "gea-graph-shared-datasets"
    root.mkdir(exist_ok=True)
    return root


@pytest.hookimpl(trylast=True)  # after pytest's own tmp_path set-up
def pytest_configure(config: pytest.Config) -> None:
    """The suite writes only under pytest's temporary folders, whatever ``$GEA_GRAPH_DATA`` says: the data root of
    every test, and of the commands it starts, is this session's shared one (see :func:`shared_data_root`)."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        os.environ["GEA_GRAPH_DATA"] = str(_shared_root(factory))


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The real-data mirror ($GEA_GRAPH_MIRROR, else ../shared/data); skips the test when there is none."""
    path = os.environ.get("GEA_GRAPH_MIRROR")
    if not path or not Path(path).is_dir():
        pytest.skip("no data mirror: set GEA_GRAPH_MIRROR to a folder laid out as shared/data "
                    "(../shared/data beside the checkout is used when present)")
    return Path(path)


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty data root ($GEA_GRAPH_DATA) for one test."""
    root = tmp_path / "datasets"
    monkeypatch.setenv("GEA_GRAPH_DATA", str(root))
    return root


@pytest.fixture(scope="session")
def shared_data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root common to all xdist workers of this test session: the parent of the per-worker base temp under
    xdist, the base temp itself without it (its parent is shared by every session: builds of older code would be
    reused). It is also ``$GEA_GRAPH_DATA`` for the whole session (:func:`pytest_configure`)."""
    return _shared_root(tmp_path_factory)


@pytest.fixture(scope="session")
def build_once(shared_data_root: Path) -> Callable:
    """``build_once(name, factory)`` runs ``factory(root)`` under a lock named after the dataset: the first worker
    builds the processed cache, the others then just load it (different datasets build in parallel)."""

    def run(name: str, factory: Callable):
        with open(shared_data_root / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return factory(shared_data_root)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    return run


@pytest.fixture(scope="session")
def zinc(mirror, build_once) -> dict:
    """The real ZINC-12k (default, Benchmarking-GNNs features) with LapPE-8 and RWPE-20, per split."""
    from gea_graph.data import ZINC

    return build_once("zinc", lambda root: {s: ZINC(root, s, pe="lap:8,rw:20") for s in ("train", "val", "test")})
