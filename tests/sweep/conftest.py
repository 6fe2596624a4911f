"""Fixtures of the sweep tests: a tiny recipe with a search space (a trial trains for seconds on 2 cores) and the
``gea-graph`` command run as a user runs it, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: TreeNeighbourMatch r=2 (generated, no download), 64 graphs a split, 3 epochs of a 2-layer MPNN.
TINY = """\
name: {name}
data: {{name: tree-r2, subset: 64}}
model: {{task: target_node, out_channels: 4, layers: 2, node_encoder: embedding, node_in: 2, node_vocab: 5,
  edge_encoder: none, head_layers: 1, family: mpnn, mpnn: gin, hidden: 16, ffn: false}}
optim: {{lr: 0.003, schedule: constant}}
trainer: {{max_epochs: {epochs}, batch_size: 16, eval_batch_size: 64, seeds: [0]}}
sweep:
  model.hidden: {{int: [8, 32], step: 8}}
  optim.lr: {{float: [1.0e-3, 1.0e-2], log: true}}
  model.mpnn: {{choice: [gin, gcn]}}
"""


def write_recipe(folder: Path, name: str = "tiny", epochs: int = 3) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(TINY.format(name=name, epochs=epochs))
    return path


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_recipe(tmp_path)


@pytest.fixture
def sweep_env(shared_data_root: Path) -> dict[str, str]:
    """The environment of a ``gea-graph sweep`` process: this checkout's package, the shared data root, one thread."""
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
               GEA_GRAPH_DATA=str(shared_data_root), OMP_NUM_THREADS="1")
    env.pop("GEA_GRAPH_STORAGE", None)
    return env


def sweep_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gea_graph", "sweep", *args, "--threads", "1"]


def run_sweep(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(sweep_command(*args), env=env, capture_output=True, text=True, timeout=timeout, check=False)
