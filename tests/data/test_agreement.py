"""Model and data agree before training starts (issue 49, R6): a recipe whose encoders read other columns or a
smaller vocabulary than its data is refused in one line naming the recipe keys, before any epoch; a matching recipe
trains, and every shipped ZINC recipe agrees with its data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gea_graph.cli import main
from gea_graph.train import load_recipe
from gea_graph.train.agreement import ModelDataMismatch, check_model_data


def _mols(path: Path, mirror: Path) -> Path:
    lines = (mirror / "zinc-subset" / "smiles_score.csv").read_text().splitlines()[1:]
    smiles = [line.split(",")[0] for line in lines if "Br" in line][:3] + [line.split(",")[0] for line in lines[:57]]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["smiles", "y", "split"])
        writer.writerows([s, i / 10, ("train", "val", "test")[i % 3]] for i, s in enumerate(dict.fromkeys(smiles)))
    return path


def test_the_issue_reproduction_is_refused_before_training_and_a_matching_recipe_trains(mirror, tmp_path, data_root,
                                                                                         monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _mols(tmp_path / "mols.csv", mirror)
    argv = ["train", "geaet-zinc-quick", "data.name=null", "data.csv=mols.csv", "data.options.smiles_column=smiles",
            "data.options.target_columns=y", "data.options.split_column=split", "data.pe=null", "model.pe=null"]
    assert main([*argv, "--out", "refused", "--no-progress"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("gea-graph train: error: model and data disagree: ")
    assert ("model.node_encoder: embedding with model.node_in: 1 and model.node_vocab: 28 reads 1 integer column(s), "
            "but data.csv mols.csv gives x with 9 integer column(s); set model.node_encoder: atom") in err[0]
    assert not (tmp_path / "refused" / "checkpoints" / "last.ckpt").exists()  # no epoch ran
    matching = [*argv, "model.node_encoder=atom", "model.edge_encoder=bond", "model.hidden=16", "model.layers=1",
                "trainer.max_epochs=1", "trainer.max_time=null", "trainer.batch_size=16"]
    assert main([*matching, "--out", "trained", "--no-progress"]) == 0
    assert json.loads((tmp_path / "trained" / "result.json").read_text())["epochs"] == 1


def test_vocabulary_and_column_kinds_are_checked(zinc):
    recipe = load_recipe("geaet-zinc-quick", ["model.node_vocab=20"])
    with pytest.raises(ModelDataMismatch, match=r"model.node_vocab: 20 has an embedding table of 20 rows for x column "
                                                r"0, but data.name zinc holds values 0..\d+ there"):
        check_model_data(recipe, zinc)
    with pytest.raises(ModelDataMismatch, match=r"model.edge_encoder: bond \(OGB's BondEncoder, 3 bond columns\) "
                                                r"reads 3 integer column\(s\), but data.name zinc gives edge_attr "
                                                r"with 1 integer column"):
        check_model_data(load_recipe("geaet-zinc-quick", ["model.edge_encoder=bond"]), zinc)


def test_every_shipped_zinc_recipe_agrees_with_its_data(zinc):
    checked = 0
    for path in sorted((Path(__file__).parents[2] / "models").glob("*.yaml")):
        recipe = load_recipe(path.stem)
        if recipe.data.name == "zinc" and (recipe.data.options or {}).get("features", "bench") == "bench":
            check_model_data(recipe, zinc)
            checked += 1
    assert checked >= 10
