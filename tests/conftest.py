"""Shared test fixtures (keep generic: several test packages use this file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_DEFAULT_MIRROR = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# Point the loaders at the offline mirror beside the checkout when the environment does not name one.
if not os.environ.get("GEA_GRAPH_MIRROR") and _DEFAULT_MIRROR.is_dir():
    os.environ["GEA_GRAPH_MIRROR"] = str(_DEFAULT_MIRROR)


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
