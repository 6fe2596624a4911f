"""Run directories: one writer at a time, resume validated before anything is written, bench reruns of changed
recipes refused, Lightning's log kept across a resume, missing targets masked, empty splits refused."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torchmetrics.functional import average_precision

from gea_graph.bench.runner import plan
from gea_graph.train import RecipeError, RunLockError, fit, read_metrics, recipe_from_dict
from gea_graph.train.data import check_splits
from gea_graph.train.lock import run_lock
from gea_graph.train.metrics import make_metric
from gea_graph.train.module import labelled
from gea_graph.train.recipe import dump_recipe

from .helpers import StopAfter

REPO = Path(__file__).resolve().parents[2]
FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 40, "avg_num_nodes": 6, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "geaet", "task": "graph_classification", "out_channels": 3, "hidden": 8, "layers": 1,
              "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2},
    "optim": {"lr": 0.01, "schedule": "cosine"},
    "trainer": {"max_epochs": 3, "batch_size": 8, "seeds": [0], "log_every_n_steps": 1},
}


def recipe(**model):
    raw = json.loads(json.dumps(FAKE))
    raw["model"].update(model)
    return recipe_from_dict(raw, name="fake")


def run(r, out, resume=False, callbacks=()):
    return fit(r, out, resume=resume, progress=False, callbacks=callbacks, verbose=False, accelerator="cpu",
               devices=1)


def lightning_rows(out: Path) -> list[dict]:
    with open(out / "logs" / "metrics.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("val/metric")]


def test_kill_resume_keeps_lightning_log_in_step_with_ours(tmp_path):
    out = tmp_path / "run"
    run(recipe(), out, callbacks=[StopAfter(2)])
    # a row logged after the last checkpoint, before the kill: the resumed run logs that step again
    with open(out / "logs" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(out / "logs" / "metrics.csv", "a", newline="") as f:
        csv.DictWriter(f, fieldnames=list(rows[0])).writerow({**rows[-1], "step": "999", "val/metric": "0.123"})
    run(recipe(), out, resume=True)
    ours = read_metrics(out / "metrics.csv")
    theirs = lightning_rows(out)
    assert len(ours) == len(theirs) == 3
    assert [float(r["val/metric"]) for r in theirs] == pytest.approx([r["val"] for r in ours])


def test_failed_resume_leaves_the_run_directory_untouched(tmp_path):
    out = tmp_path / "run"
    run(recipe(), out, callbacks=[StopAfter(1)])
    before = {p: p.read_bytes() for p in [out / "recipe.yaml", out / "metrics.csv", out / "checkpoints/last.ckpt"]}
    with pytest.raises(RecipeError, match=r"different recipe \(model\.hidden: 8 -> 16\)"):
        run(recipe(hidden=16), out, resume=True)
    assert {p: p.read_bytes() for p in before} == before


def test_bench_refuses_a_run_of_other_overrides(tmp_path):
    path = tmp_path / "fake.yaml"
    path.write_text(yaml.safe_dump(FAKE))
    out = tmp_path / "bench"
    (done,) = plan([str(path)], [0], out, ["model.hidden=8"])
    done.run_dir.mkdir(parents=True)
    dump_recipe(done.recipe, done.run_dir / "recipe.yaml")
    (done.run_dir / "result.json").write_text(json.dumps({"val": 0.5, "epochs": 1}))
    assert plan([str(path)], [0], out, ["model.hidden=8", "trainer.max_time=5"])[0].result is not None
    with pytest.raises(RecipeError, match=r"seed0 holds a run of a different recipe \(model\.hidden: 8 -> 32\)"):
        plan([str(path)], [0], out, ["model.hidden=32"])


def test_one_process_per_run_directory(tmp_path):
    out = tmp_path / "run"
    with run_lock(out), pytest.raises(RunLockError, match=rf"in use by pid {os.getpid()} on "):
        run(recipe(), out)
    assert not (out / "recipe.yaml").exists()
    with run_lock(out):  # released
        pass


def test_a_second_process_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    code = ("import sys; from gea_graph.train.lock import run_lock\n"
            f"with run_lock({str(out)!r}):\n    print('locked', flush=True); sys.stdin.read()")
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockError, match=rf"{out} is in use by pid {holder.pid} on .* since "):
            run(recipe(), out)
    finally:
        holder.communicate("", timeout=60)
    with run_lock(out):  # free again once the holder has exited
        pass


def test_missing_targets_are_masked_in_loss_and_metric(tmp_path):
    pred = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    target = torch.tensor([[1.5, float("nan")], [float("nan"), 5.0]])
    p, t = labelled(pred, target, "graph_regression")
    assert p.tolist() == [1.0, 4.0] and t.tolist() == [1.5, 5.0]
    assert labelled(pred, target, "graph_classification")[1] is target
    # multi-label AP leaves missing labels out per label (as OGB's evaluator)
    ap = make_metric("ap", recipe(task="graph_multilabel", out_channels=2).model)
    scores = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3], [0.1, 0.6]])
    labels = torch.tensor([[1.0, 0.0], [0.0, float("nan")], [1.0, 1.0], [0.0, 1.0]])
    ap.update(scores, labels.nan_to_num(-1.0).long())
    expected = [average_precision(scores[:, 0], labels[:, 0].long(), task="binary"),
                average_precision(scores[[0, 2, 3], 1], labels[[0, 2, 3], 1].long(), task="binary")]
    assert float(ap.compute()) == pytest.approx(float(sum(expected) / 2))

    smiles = ["CCO", "c1ccccc1", "CC(=O)O", "CCN", "CCCl", "C1CCCCC1", "CC=O", "COC", "CCCC", "c1ccncc1"]
    table = tmp_path / "mols.csv"
    table.write_text("smiles,a,b\n" + "\n".join(f"{s},{'' if i % 3 == 0 else i},{'' if i % 4 == 1 else -i}"
                                                  for i, s in enumerate(smiles)) + "\n")
    raw = {"data": {"csv": str(table), "root": str(tmp_path / "data"),
                    "options": {"smiles_column": "smiles", "target_columns": ["a", "b"],
                                "split_fractions": [0.6, 0.2, 0.2]}},
           "model": {"family": "geaet", "task": "graph_regression", "out_channels": 2, "hidden": 8, "layers": 1},
           "trainer": {"max_epochs": 1, "batch_size": 4, "seeds": [0]}}
    result = run(recipe_from_dict(raw, name="mols"), tmp_path / "run")
    row = read_metrics(tmp_path / "run" / "metrics.csv")[0]
    assert not any(math.isnan(v) for v in (result["val"], result["test"], row["train_loss"]))


def test_unusable_splits_are_refused(tmp_path):
    r = recipe()
    graphs = [type("G", (), {"y": torch.tensor([1.0])})() for _ in range(3)]
    with pytest.raises(ValueError, match="the val split is empty"):
        check_splits({"train": graphs, "val": [], "test": graphs}, r)
    nan = [type("G", (), {"y": torch.tensor([float("nan")])})()]
    with pytest.raises(ValueError, match=r"missing \(NaN\) class labels \(graphs \[0\]\)"):
        check_splits({"train": graphs, "val": nan, "test": graphs}, r)
    inf = [type("G", (), {"y": torch.tensor([float("inf")])})()]
    with pytest.raises(ValueError, match="infinite targets"):
        check_splits({"train": inf, "val": graphs, "test": graphs}, r)


def test_train_says_which_recipe_file_it_resolved(tmp_path, monkeypatch, capsys):
    from gea_graph.cli import main

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "gin-tree-r2.yaml").write_text((REPO / "models" / "gin-tree-r2.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    assert main(["train", "gin-tree-r2", "optim.lr=-1", "--out", str(tmp_path / "run")]) == 2
    out = capsys.readouterr().out
    shadowed = (REPO / "models" / "gin-tree-r2.yaml").resolve()
    assert f"recipe: {tmp_path.resolve() / 'models' / 'gin-tree-r2.yaml'} (shadows the packaged {shadowed})" in out


def test_a_cap_that_runs_out_during_evaluation_ends_the_run_at_that_epoch(tmp_path, monkeypatch):
    # Lightning's Timer checks the cap after training steps only; with that check switched off, only the check at
    # the epoch's end (after its evaluation) can end the run: it must, at the first epoch, not train 3
    from lightning.pytorch.callbacks import Timer

    monkeypatch.setattr(Timer, "on_train_batch_end", lambda *args, **kwargs: None)
    result = fit(recipe(), tmp_path / "run", progress=False, verbose=False, accelerator="cpu", devices=1,
                 max_time=1e-5)
    assert result["epochs"] == 1
    assert len(read_metrics(tmp_path / "run" / "metrics.csv")) == 1
