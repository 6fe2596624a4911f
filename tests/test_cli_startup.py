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
HEAVY = ("torch", "torch_geometric", "lightning", "pytorch_lightning", "rdkit", "ogb", "optuna", "matplotlib",
         "torchmetrics", "sklearn")


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


def test_listing_suites_imports_no_heavy_library():
    # the sizes come from the recipes' YAML (the suite's overrides applied), not from built recipes
    proc, heavy = loaded_by("bench", "--list-suites")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "zinc-cpu-10min" in proc.stdout
    assert heavy == [], heavy


def test_listing_datasets_imports_no_heavy_library(tmp_path):
    # the dataset cards name their classes by path: no dataset module (PyG, RDKit, OGB) is imported to list them
    proc, heavy = loaded_by("data", "list", "--root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "peptides-func" in proc.stdout and "tree-r7" in proc.stdout
    assert heavy == [], heavy


def test_listing_recipes_imports_no_heavy_library():
    # every recipe by name, read from its YAML: its dataset and positional encoding, and the paper row it copies
    proc, heavy = loaded_by("info", "--list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert sorted(rows) == sorted(p.stem for p in (ROOT / "models").glob("*.yaml"))
    paper = "GraphGPS (Rampasek et al., 2022), Table 2 (GPS, ZINC)"
    assert rows["gps-zinc"].split(None, 3)[1:] == ["zinc", "(rw:20)", paper]  # a paper row: its source
    assert "A few-minute CPU version" in rows["geaet-zinc-quick"]  # no paper row: the start of its description
    assert heavy == [], heavy


@pytest.mark.parametrize("recipe", ["geaet-zinc-quick", "gcn-peptides-func"])
def test_info_imports_torch_and_pyg_only(recipe):
    # building the model needs torch and PyG's layers; no trainer, metric, dataset, plotting or search library. A
    # recipe that reads OGB's atom features (peptides) imports OGB for its encoders, and nothing else more.
    proc, heavy = loaded_by("info", recipe)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1].startswith("params: ")  # the guarded feature: the model is built and counted
    ogb = ["ogb", "rdkit", "sklearn"] if "peptides" in recipe else []
    assert heavy == sorted(["torch", "torch_geometric", *ogb]), heavy


def test_the_suite_writes_its_data_under_pytest_temporary_folders(tmp_path_factory):
    # tests/conftest.py points $GEA_GRAPH_DATA at the session's shared temporary root, whatever it said before
    root = Path(os.environ["GEA_GRAPH_DATA"]).resolve()
    base = tmp_path_factory.getbasetemp().resolve()
    assert root.is_relative_to(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
    from gea_graph.data.config import data_root

    assert Path(data_root()).resolve() == root  # what the loaders (and the commands the tests start) use
