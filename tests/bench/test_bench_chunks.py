"""GPU work in chunks: ``gea-graph bench --stop-after MINUTES`` stops cleanly (each run at an epoch end), and the
bench folder, carried elsewhere and resumed there chunk after chunk, reaches the results of an uninterrupted bench."""
import json
import shutil

import pytest
import torch
import yaml

from gea_graph.cli import main
from gea_graph.train import load_checkpoint, read_metrics
from gea_graph.train.run import PAUSED_EXIT_CODE

RECIPE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 60, "avg_num_nodes": 8, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "geaet", "task": "graph_classification", "out_channels": 3, "hidden": 16, "layers": 2,
              "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2, "dropout": 0.1},
    "optim": {"lr": 0.01, "schedule": "cosine", "warmup_epochs": 1},
    "trainer": {"max_epochs": 3, "batch_size": 8, "seeds": [0], "log_every_n_steps": 1},
}


def bench(recipe, out, *more):
    return main(["bench", "--recipes", str(recipe), "--seeds", "0", "--out", str(out), "--accelerator", "cpu",
                 "--threads", "1", *more])


def test_a_chunked_bench_carried_to_another_folder_reaches_the_uninterrupted_result(tmp_path):
    recipe = tmp_path / "fake.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE))
    assert bench(recipe, tmp_path / "whole") == 0

    whole = tmp_path / "whole" / "fake" / "seed0"
    best_epoch = json.loads((whole / "result.json").read_text())["best_epoch"]
    assert best_epoch < 2  # the premise below: the epoch after the move is not the best one

    # --stop-after 0: every chunk stops its run at the first epoch end, so each invocation adds exactly one epoch
    # (no timing in the test). Two chunks run here; the folder then moves (as to a GPU machine and back) and the
    # last chunk runs there.
    for epochs in (1, 2):
        assert bench(recipe, tmp_path / "here", "--stop-after", "0") == PAUSED_EXIT_CODE
        run = tmp_path / "here" / "fake" / "seed0"
        assert not (run / "result.json").exists() and (run / "checkpoints" / "last.ckpt").is_file()
        assert len(read_metrics(run / "metrics.csv")) == epochs
    shutil.copytree(tmp_path / "here", tmp_path / "there")
    shutil.rmtree(tmp_path / "here")  # nothing of the first folder is needed
    assert bench(recipe, tmp_path / "there", "--stop-after", "0") == 0  # the run ends: the bench is complete

    there = tmp_path / "there" / "fake" / "seed0"
    a, b = (json.loads((d / "result.json").read_text()) for d in (whole, there))
    for key in ("epochs", "best_epoch", "val", "test", "params"):
        assert a[key] == b[key], key
    for ra, rb in zip(read_metrics(whole / "metrics.csv"), read_metrics(there / "metrics.csv"), strict=True):
        for key in ("epoch", "train_loss", "val", "test", "lr"):
            assert ra[key] == pytest.approx(rb[key], rel=1e-6, abs=1e-9), (key, ra, rb)
    # best.ckpt is the best epoch's model in both: the moved run kept its best score (Lightning forgets it when the
    # folder's path changes, and would have saved the first epoch after the move as the best)
    best_a, best_b = (load_checkpoint(d / "checkpoints" / "best.ckpt") for d in (whole, there))
    assert best_a["epoch"] == best_b["epoch"]
    for key, value in best_a["state_dict"].items():
        torch.testing.assert_close(best_b["state_dict"][key], value, rtol=1e-5, atol=1e-7)
    info = json.loads((tmp_path / "there" / "bench.json").read_text())
    assert [s["stop_after_min"] for s in info["invocations"]] == [0.0, 0.0, 0.0]
    assert (tmp_path / "there" / "results.csv").read_text().count("\n") == 2
