"""Training runs on a small generated dataset: checkpoints, exact resume, clear errors (DDP: test_distributed.py)."""
import json
from pathlib import Path

import pytest
import torch
import yaml

from gea_graph.train import (
    CheckpointError,
    RecipeError,
    fit,
    load_checkpoint,
    load_recipe,
    read_metrics,
    recipe_from_dict,
)

from .helpers import StopAfter

FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 80, "avg_num_nodes": 8, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "geaet", "task": "graph_classification", "out_channels": 3, "hidden": 16, "layers": 2,
              "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2, "dropout": 0.1},
    "optim": {"lr": 0.01, "schedule": "cosine", "warmup_epochs": 1},
    "trainer": {"max_epochs": 4, "batch_size": 8, "eval_batch_size": 4, "seeds": [0], "log_every_n_steps": 1},
}


def write_recipe(path: Path, raw=FAKE, **trainer) -> Path:
    raw = json.loads(json.dumps(raw))
    raw["trainer"].update(trainer)
    path.write_text(yaml.safe_dump(raw))
    return path


def run(out, resume=False, callbacks=()):
    return fit(recipe_from_dict(FAKE, name="fake"), out, resume=resume, progress=False, callbacks=callbacks,
               verbose=False, accelerator="cpu", devices=1)


def test_run_directory_and_kill_resume_reproduces(tmp_path):
    full = run(tmp_path / "full")
    for name in ("checkpoints/best.ckpt", "checkpoints/last.ckpt", "recipe.yaml", "metrics.csv", "result.json"):
        assert (tmp_path / "full" / name).is_file(), name
    assert full["epochs"] == 4 and full["params"] > 0

    assert run(tmp_path / "cut", callbacks=[StopAfter(2)])["epochs"] == 2
    with pytest.raises(FileExistsError):
        run(tmp_path / "cut")  # an existing run needs --resume
    resumed = run(tmp_path / "cut", resume=True)
    a = read_metrics(tmp_path / "full" / "metrics.csv")
    b = read_metrics(tmp_path / "cut" / "metrics.csv")
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b):
        for key in ("train_loss", "val", "test", "lr"):
            assert ra[key] == pytest.approx(rb[key], rel=1e-6, abs=1e-7), (key, ra, rb)
    assert (resumed["best_epoch"], resumed["val"], resumed["test"]) == (full["best_epoch"], full["val"],
                                                                        full["test"])
    ckpt = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.ckpt")  # weights_only=True
    assert ckpt["hyper_parameters"]["recipe"]["model"]["hidden"] == 16


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "checkpoints" / "last.ckpt"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="last.ckpt.*corrupt"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointError, match="corrupt"):
        run(tmp_path, resume=True)


def test_unknown_and_missing_keys_name_key_and_file(tmp_path):
    raw = json.loads(json.dumps(FAKE))
    raw["model"]["hiden"] = 3
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(RecipeError, match=r"typo\.yaml.*unknown key 'model\.hiden'"):
        load_recipe(path)
    del raw["model"]["hiden"], raw["model"]["task"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(RecipeError, match=r"typo\.yaml.*missing required key 'model\.task'"):
        load_recipe(path)
    with pytest.raises(RecipeError, match="no recipe named") as refused:
        load_recipe("no-such-recipe")
    assert "did you mean" not in str(refused.value)
    with pytest.raises(RecipeError, match=r"; did you mean geaet-zinc-quick or ") as refused:
        load_recipe("geaet-zink-quick")  # a typo: the nearest names
    folders = str(refused.value).split(" in ", 1)[1].split(";")[0].split(", ")
    assert len(folders) == len(set(folders))  # each searched folder named once


def test_overrides_are_typed(tmp_path):
    path = write_recipe(tmp_path / "r.yaml")
    recipe = load_recipe(path, ["model.hidden=64", "optim.lr=1e-4", "model.attn=null", "trainer.seeds=[3,4]"])
    assert recipe.model.hidden == 64 and recipe.optim.lr == 1e-4 and recipe.model.attn is None
    assert recipe.trainer.seeds == [3, 4]
    with pytest.raises(RecipeError, match="model.hidden"):
        load_recipe(path, ["model.hidden=wide"])


def test_user_molecule_csv_recipe_needs_no_code(tmp_path):
    smiles = ["CCO", "c1ccccc1", "CC(=O)O", "CCN", "CCCl", "C1CCCCC1", "CC=O", "COC", "CCCC", "c1ccncc1"]
    table = tmp_path / "mols.csv"
    table.write_text("smiles,score\n" + "\n".join(f"{s},{i / 10}" for i, s in enumerate(smiles)) + "\n")
    raw = {"data": {"csv": str(table), "root": str(tmp_path / "data"), "pe": "rw:4",
                    "options": {"smiles_column": "smiles", "target_columns": "score"}},
           "model": {"family": "geaet", "task": "graph_regression", "out_channels": 1, "hidden": 16, "layers": 1,
                     "pe": {"kind": "rw", "size": 4, "dim": 4}},
           "trainer": {"max_epochs": 1, "batch_size": 4, "seeds": [0]}}
    result = fit(recipe_from_dict(raw, name="mols"), tmp_path / "run", progress=False, verbose=False,
                 accelerator="cpu", devices=1)
    assert result["dataset"] == "mols" and result["metric"] == "mae" and result["epochs"] == 1


def test_class_balanced_cross_entropy_weights_rare_classes():
    import torch.nn.functional as F

    from gea_graph.train.metrics import class_balanced_cross_entropy

    logits = torch.randn(6, 4, dtype=torch.float64)
    target = torch.tensor([0, 0, 0, 0, 2, 2])
    # by hand: M = 6, m_0 = 4, m_2 = 2 -> w_0 = 2/6, w_2 = 4/6, absent classes 0
    weight = torch.tensor([2 / 6, 0.0, 4 / 6, 0.0], dtype=torch.float64)
    nll = -F.log_softmax(logits, dim=-1)[torch.arange(6), target]
    expected = (weight[target] * nll).sum() / weight[target].sum()
    torch.testing.assert_close(class_balanced_cross_entropy(logits, target), expected)
    # one class only: plain cross-entropy, not 0/0
    same = torch.zeros(6, dtype=torch.long)
    torch.testing.assert_close(class_balanced_cross_entropy(logits, same), F.cross_entropy(logits, same))
