"""Fast starts and a suite that keeps to itself (issue 49, R10): the light commands import no heavy library (checked
by the modules loaded, never by the clock), and the tests' data root is under pytest's temporary folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torch_geometric", "lightning", "rdkit", "ogb")


def loaded_by(*argv: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Runs ``gea-graph ARGV`` in a fresh interpreter; returns the process and the heavy modules it imported."""
    code = ("import json, sys\nfrom gea_graph.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
            "finally:\n    print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{HEAVY!r} and '.' not in m)), file=sys.stderr)\nsys.exit(code)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, check=False)
    return proc, json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["bench", "--help"], ["predict", "--help"]])
def test_help_imports_no_heavy_library(argv):
    proc, heavy = loaded_by(*argv)
    assert proc.returncode == 0
    assert "usage: gea-graph" in proc.stdout  # the guarded feature: the help is all there
    assert heavy == [], heavy


def test_listing_suites_imports_no_lightning():
    # its recipes are read and checked (with PyG's registries), but no trainer is built: Lightning stays out
    proc, heavy = loaded_by("bench", "--list-suites")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "zinc-cpu-10min" in proc.stdout
    assert "lightning" not in heavy, heavy


def test_the_suite_writes_its_data_under_pytest_temporary_folders(tmp_path_factory):
    # tests/conftest.py points $GEA_GRAPH_DATA at the session's shared temporary root, whatever it said before
    root = Path(os.environ["GEA_GRAPH_DATA"]).resolve()
    base = tmp_path_factory.getbasetemp().resolve()
    assert root.is_relative_to(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
    from gea_graph.data.config import data_root

    assert Path(data_root()).resolve() == root  # what the loaders (and the commands the tests start) use
