import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import gea_graph
from gea_graph.cli import build_parser


def test_version_and_cli_help():
    assert gea_graph.__version__
    parser = build_parser()
    assert parser.prog == "gea-graph"
    out = subprocess.run(
        [sys.executable, "-m", "gea_graph", "--help"], capture_output=True, text=True, check=True
    )
    assert "gea-graph" in out.stdout


_NO_RDKIT_DRAWING = """
import importlib.abc, sys

class NoDrawing(importlib.abc.MetaPathFinder):  # RDKit's drawing module without libXrender, as on a headless GPU box
    def find_spec(self, name, path, target=None):
        if name.startswith("rdkit.Chem.Draw"):
            raise ImportError("libXrender.so.1: cannot open shared object file")

sys.meta_path.insert(0, NoDrawing())
sys.argv = ["gea-graph", *sys.argv[1:]]
from gea_graph.cli import main
import gea_graph.viz.scores  # the score reductions need no drawing either
code = main()
assert "gea_graph.viz.draw" not in sys.modules, "a command without pictures imported the drawing module"
sys.exit(code)
"""


def test_cli_runs_where_rdkit_cannot_draw(tmp_path):
    # `viz` is the only command that draws; every other command must work on a machine without X11 client libraries
    out = subprocess.run([sys.executable, "-c", _NO_RDKIT_DRAWING, "data", "list"], capture_output=True, text=True,
                         check=False,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "zinc" in out.stdout


def test_ruff_check_passes_line_length_included():
    """The configured lint (pyproject.toml: line length 120, import order) holds for the whole checkout."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                         check=False, capture_output=True, text=True, cwd=repo)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_a_wheel_carries_the_recipes(tmp_path):
    # What `pip install gea-graph` (or a git URL) gives: no checkout beside the package, yet recipe names resolve.
    pytest.importorskip("setuptools", minversion="77")  # pyproject.toml's build requirement
    root, src = Path(__file__).resolve().parents[1], tmp_path / "src"
    shutil.copytree(root / "gea_graph", src / "gea_graph", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "models", src / "models")  # built from a copy: the checkout gets no build/ folder
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(root / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "wheel"), str(src)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "wheel").glob("gea_graph-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        packed = sorted(Path(n).name for n in archive.namelist() if n.startswith("gea_graph/recipes/"))
        archive.extractall(site)  # installing a pure wheel is unpacking it
    assert packed == sorted(p.name for p in (root / "models").glob("*.yaml"))
    code = ("from gea_graph.train.recipe import load_recipe, resolve_recipe; "
            "print(resolve_recipe('geaet-zinc-quick')); print(load_recipe('geaet-zinc-quick').model.family)")
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1"}
    env.pop("GEA_GRAPH_RECIPES", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == [str(site / "gea_graph" / "recipes" / "geaet-zinc-quick.yaml"), "geaet"]
