"""Search spaces: the distributions a sweep: block names, and a bad space refused in one line naming the key, exit
code 2, before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from gea_graph.cli import main
from gea_graph.sweep.space import SpaceError, check_space, parse_space, trial_recipe
from gea_graph.train import load_recipe
from tests.sweep.conftest import TINY


def test_the_issue_example_reads_as_optuna_distributions():
    space = parse_space({"model.hidden": {"int": [32, 128], "step": 16},
                         "optim.lr": {"float": [1e-4, 3e-3], "log": True},
                         "model.layer_args.external_dropout": {"float": [0, 0.5]},
                         "model.attn": {"choice": ["softmax", "gfsa"]}}, "test")
    assert space["model.hidden"] == IntDistribution(32, 128, step=16)
    assert space["optim.lr"] == FloatDistribution(1e-4, 3e-3, log=True)
    assert space["model.layer_args.external_dropout"] == FloatDistribution(0.0, 0.5)
    assert space["model.attn"] == CategoricalDistribution(["softmax", "gfsa"])


@pytest.mark.parametrize("key, spec, words", [
    ("model.hidden", {"int": [32]}, "[low, high]"),
    ("model.hidden", {"int": [128, 32]}, "above high"),
    ("model.hidden", {"int": [32, 100], "step": 16}, "whole number of steps"),
    ("model.hidden", {"int": [32, 128], "stp": 16}, "unknown option 'stp'"),
    ("optim.lr", {"float": [0, 1e-3], "log": True}, "log needs low > 0"),
    ("optim.lr", {"float": [1e-4, 1e-3], "log": True, "step": 1e-4}, "step or log"),
    ("optim.lr", {"float": ["a", 1]}, "[low, high]"),
    ("model.attn", {"choice": []}, "non-empty list"),
    ("model.attn", {"choice": ["a", "a"]}, "repeats"),
    ("model.attn", {"int": [1, 2], "choice": [1]}, "exactly one"),
    ("model.attn", 3, "not a distribution"),
    ("name", {"choice": ["a", "b"]}, "not a training setting"),
    ("model..hidden", {"int": [1, 2]}, "dotted recipe key"),
])
def test_a_bad_distribution_names_its_key(key, spec, words):
    with pytest.raises(SpaceError) as err:
        parse_space({key: spec}, "src")
    assert f"sweep key '{key}'" in str(err.value) and words in str(err.value)


def test_every_bound_and_choice_passes_the_recipe_checks(tiny):
    check_space(tiny, parse_space({"model.hidden": {"int": [8, 32], "step": 8}}, "s"), [], "s")
    for spec, why in (({"model.hiddn": {"int": [8, 32]}}, "unknown key 'model.hiddn'"),
                      ({"model.hidden": {"int": [0, 32]}}, "model.hidden"),
                      ({"model.mpnn": {"choice": ["gin", "nosuch"]}}, "'nosuch'"),
                      ({"model.dropout": {"float": [0, 1.0]}}, "model.dropout")):
        with pytest.raises(SpaceError) as err:
            check_space(tiny, parse_space(spec, "s"), [], "s")
        assert f"sweep key '{next(iter(spec))}'" in str(err.value) and why in str(err.value), str(err.value)


def test_a_trial_recipe_carries_the_drawn_values(tiny):
    recipe, params = trial_recipe(tiny, {"model.hidden": 24, "optim.lr": 0.002, "model.mpnn": "gcn"})
    assert (recipe.model.hidden, recipe.optim.lr, recipe.model.mpnn) == (24, 0.002, "gcn")
    from gea_graph.train import GraphTask

    assert params == GraphTask(recipe.to_dict()).num_parameters()  # what --max-params compares, before training


def test_recipes_accept_a_sweep_block_and_training_ignores_it(tiny):
    from gea_graph.train.run_dir import recipe_digest

    recipe = load_recipe(tiny)
    assert recipe.sweep["model.hidden"] == {"int": [8, 32], "step": 8}
    plain = recipe.to_dict()
    plain["sweep"] = {}
    assert recipe_digest(plain) == recipe_digest(recipe.to_dict())  # a new space does not make runs differ


@pytest.mark.parametrize("space, words", [
    ("model.hiddn: {int: [8, 32]}\n", "sweep key 'model.hiddn'"),
    ("model.hidden: {int: [0, 32]}\n", "sweep key 'model.hidden'"),
    ("optim.lr: {float: [1.0e-4, 1.0e-3], lg: true}\n", "unknown option 'lg'"),
])
def test_the_cli_refuses_a_bad_space_in_one_line_and_writes_nothing(tmp_path, tiny, capsys, space, words):
    file = tmp_path / "space.yaml"
    file.write_text(space)
    out = tmp_path / "sweep"
    assert main(["sweep", str(tiny), "--out", str(out), "--trials", "1", "--space", str(file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gea-graph sweep: error: ") and words in err[0], err
    assert not out.exists()


def test_a_recipe_without_a_space_is_refused(tmp_path, capsys):
    path = tmp_path / "plain.yaml"
    path.write_text(TINY.format(name="plain", epochs=1).split("sweep:")[0])
    assert main(["sweep", str(path), "--out", str(tmp_path / "s"), "--trials", "1"]) == 2
    assert "has no sweep: block" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_sweep_json_names_recipes_relative_to_the_working_folder(tmp_path, monkeypatch):
    from gea_graph.sweep.run import _recorded_path

    (tmp_path / "work" / "models").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    assert _recorded_path(Path("models/r.yaml")) == str(Path("models/r.yaml"))
    assert _recorded_path(tmp_path / "elsewhere.yaml") == str((tmp_path / "elsewhere.yaml").resolve())
