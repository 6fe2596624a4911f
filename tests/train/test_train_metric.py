"""``trainer.eval_train``: the selected checkpoint's metric on the training split, in ``result.json`` as ``train``
(what the bottleneck benchmark, TreeNeighbourMatch, reports), through a pause and ``--resume``."""
from __future__ import annotations

import json
import math

import torch

from gea_graph.cli import main
from gea_graph.train import GraphTask, load_checkpoint, load_recipe, read_metrics
from gea_graph.train.data import load_datasets, make_loader
from gea_graph.train.metrics import metric_input, prepare

TINY_TREE = ["trainer.max_epochs=3", "trainer.eval_batch_size=10"]


def best_on_train(run_dir, overrides) -> float:
    r"""The metric of ``best.ckpt`` on the whole training split, evaluated here in one process, in eval mode."""
    ckpt = load_checkpoint(run_dir / "checkpoints" / "best.ckpt")
    task = GraphTask(ckpt["hyper_parameters"]["recipe"])
    task.load_state_dict(ckpt["state_dict"])
    task.eval()
    metric = task.val_metric
    train = load_datasets(load_recipe("gin-tree-r2", overrides).data)["train"]
    with torch.no_grad():
        for batch in make_loader(train, 7):
            metric.update(*metric_input(task.metric_name, *prepare(task.model(batch), batch, task.task)))
    return float(metric.compute())


def test_result_has_the_best_checkpoints_train_metric_after_a_pause_and_resume(tmp_path):
    out = tmp_path / "run"
    args = ["train", "gin-tree-r2", *TINY_TREE, "trainer.eval_train=true", "--out", str(out), "--no-progress",
            "--threads", "1"]
    assert main([*args, "--stop-after", "0"]) == 3  # paused after its first epoch: no result, no train pass
    assert not (out / "result.json").exists()
    assert main([*args, "--resume"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["epochs"] == 3 and len(read_metrics(out / "metrics.csv")) == 3  # the history is kept whole
    assert 0.0 <= result["train"] <= 1.0 and result["train_more"] == {}
    assert result["train"] == best_on_train(out, TINY_TREE)


def test_train_is_absent_without_eval_train(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "gin-tree-r2", "trainer.max_epochs=1", "trainer.eval_train=false", "--out", str(out),
                 "--no-progress", "--threads", "1"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert "train" not in result and not math.isnan(result["test"])
    assert ", train " not in capsys.readouterr().out
