"""What `gea-graph bench` tells its user (issue 49): a line per epoch of each run, GraphGPS-style, without Lightning's
banners unless --verbose (R9); a run its time cap ended early is marked in result.json, results.md and the console,
epochs counted from 1 (R8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 24, "avg_num_nodes": 5, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "mpnn", "mpnn": "gine", "task": "graph_classification", "out_channels": 3, "hidden": 8,
              "layers": 1, "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2},
    "trainer": {"max_epochs": 2, "batch_size": 8, "seeds": [0]},
}
BANNERS = ("GPU available", "TPU available", "litlogger", "LeafSpec")


def bench(tmp_path: Path, out: str, *more: str) -> subprocess.CompletedProcess:
    recipe = tmp_path / "tiny-fake.yaml"
    recipe.write_text(yaml.safe_dump(FAKE))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "gea_graph", "bench", "--recipes", str(recipe), "--seeds", "0",
                           "--out", str(tmp_path / out), "--accelerator", "cpu", "--threads", "1", *more],
                          capture_output=True, text=True, env=env, check=False)


def test_a_run_cut_by_its_time_cap_says_so_everywhere_with_a_line_per_epoch(tmp_path):
    # far more epochs than any machine trains in 6 seconds: the cap ends the run, whatever the machine's speed
    proc = bench(tmp_path, "cut", "--max-time", "0.1", "--set", "trainer.max_epochs=100000")
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]
    result = json.loads((tmp_path / "cut" / "tiny-fake" / "seed0" / "result.json").read_text())
    assert result["cut_by_time_cap"] is True and result["epochs_planned"] == 100000
    assert 1 <= result["epochs"] < 100000
    done = result["epochs"]
    assert "tiny-fake seed 0: epoch 1/100000  train loss " in proc.stdout  # GraphGPS-style, 1-based
    assert f"tiny-fake seed 0: epoch {done}/100000 " in proc.stdout  # one line for every epoch, the last included
    assert f"done, {done} of 100000 epochs, cut by the time cap (0.1 min)" in proc.stdout
    table = (tmp_path / "cut" / "results.md").read_text()
    assert f"| {done} of 100000\\* |" in table and "cut by the time cap" in table
    for banner in BANNERS:  # silenced at the source
        assert banner not in console, banner


def test_a_complete_run_is_not_marked_and_verbose_shows_lightning(tmp_path):
    proc = bench(tmp_path, "full", "--verbose")
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]
    result = json.loads((tmp_path / "full" / "tiny-fake" / "seed0" / "result.json").read_text())
    assert result["cut_by_time_cap"] is False and result["epochs"] == result["epochs_planned"] == 2
    assert "tiny-fake seed 0: epoch 2/2  train loss " in proc.stdout
    assert "done, 2 epochs" in proc.stdout and "cut by" not in proc.stdout
    assert "| 2 |" in (tmp_path / "full" / "results.md").read_text()
    assert "GPU available" in console  # --verbose: Lightning's own lines come back
