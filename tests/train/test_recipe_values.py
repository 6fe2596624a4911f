"""Every recipe key is checked with its range when the recipe is read (issue 23): a walk over the keys of the recipe's
sections (so a key added later is walked too), the YAML loader that refuses aliases and tags (D7), and names that are
one path component (D3)."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path

import pytest
import yaml

from gea_graph.cli import main
from gea_graph.train.recipe import RANGES, Recipe, RecipeError, available_recipes, load_recipe

BASE = "geaet-zinc-quick"
#: A paper section, so that the paper.* keys have a recipe to sit in.
PAPER = ["paper.source=Nobody (2099)", "paper.metric=MAE", "paper.value=0.1"]
#: Text keys that take any text (each is checked where it is used, or is a description).
FREE_TEXT = {
    "name": "checked as one path component (test_a_name_is_one_path_component)",
    "description": "prose", "paper.source": "prose", "paper.metric": "the paper's own name of its metric",
    "data.csv": "a file, checked when the dataset is built", "data.cls": "a class, checked when imported",
    "data.root": "a folder, made when the dataset is built", "data.pe": "checked by parse_pe (test_cli_errors)",
    "data.name": "checked against the datasets (test_cli_errors)",
}


def leaf_keys(cls: type = Recipe, prefix: str = "") -> dict[str, typing.Any]:
    """Every key of the recipe's sections with its type (dataclasses walked; ``*_args``/``options`` mappings are
    passed to constructors and checked against their signatures)."""
    out = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 else tp
        if dataclasses.is_dataclass(inner):
            out.update(leaf_keys(inner, f"{prefix}{f.name}."))
        elif typing.get_origin(inner) is not dict:
            out[f"{prefix}{f.name}"] = inner
    return out


KEYS = leaf_keys()
NUMERIC = {k: t for k, t in KEYS.items() if t in (int, float) or typing.get_args(t) in ((int,), (float,))}


def bad_values(key: str) -> list[str]:
    """Values outside the key's range (as override text)."""
    spec, tp = RANGES[key], KEYS[key]
    listed = typing.get_origin(tp) is list
    if spec == "fraction":
        values = ["-0.1", "1.0", ".nan"]
    else:
        low, high = spec[0], spec[1]
        integer = tp is int or typing.get_args(tp) == (int,)
        step = 1 if integer else 1e-3 * max(1.0, abs(high))
        values = [str(low - step), str(high + step)] + ([str(low), str(high)] if len(spec) == 3 else [])
        values += [] if integer else [".nan", ".inf"]
    values = [f"[{v}]" if listed else v for v in values]
    return [*values, "x"]


def load(*overrides: str):
    return load_recipe(BASE, [*PAPER, *overrides])


def test_every_numeric_key_has_a_range():
    assert {"trainer.max_time", "model.hidden", "optim.lr", "model.graphormer.max_distance"} <= set(NUMERIC)
    missing = sorted(set(NUMERIC) - set(RANGES))
    assert not missing, f"recipe keys without a range in gea_graph.train.recipe.RANGES: {missing}"
    assert not sorted(set(RANGES) - set(KEYS)), "RANGES names keys the recipe does not have"


@pytest.mark.parametrize(("key", "value"), [(k, v) for k in sorted(RANGES) for v in bad_values(k)])
def test_a_value_out_of_range_is_refused_naming_key_and_value(key, value):
    with pytest.raises(RecipeError) as err:
        load(f"{key}={value}")
    message = str(err.value)
    assert len(message.splitlines()) == 1 and (f"'{key}'" in message or f"{key}:" in message), message


def test_every_choice_key_refuses_an_unknown_name():
    text = sorted(k for k, t in KEYS.items() if t is str or typing.get_args(t) == (str,))
    unchecked = []
    for key in text:
        if key in FREE_TEXT:
            continue
        try:
            load(f"{key}=nosuch")
        except RecipeError as err:
            assert f"{key}" in str(err) or "nosuch" in str(err), str(err)
        else:
            unchecked.append(key)
    assert not unchecked, f"text keys that accept any value (check them, or list them in FREE_TEXT): {unchecked}"
    for key in text:  # the wrong type is refused by the loader, and no path or name is empty
        with pytest.raises(RecipeError, match=key.replace(".", r"\.")):
            load(f"{key}=[1, 2]")
    for key in ("data.root", "data.csv"):
        with pytest.raises(RecipeError, match=f"{key}: '' is not allowed"):
            load(f"{key}=''")


def test_good_values_at_the_ends_of_the_ranges_are_accepted():
    recipe = load("trainer.max_time=0.001", "model.dropout=0.0", "optim.betas=[0.0, 0.999]", "trainer.seeds=[0, "
                  "4294967295]", "model.graphormer.max_distance=254", "data.pe=rw:256", "model.pe.size=256")
    assert recipe.trainer.seeds[-1] == 2 ** 32 - 1 and recipe.model.pe.size == 256
    assert {r: load_recipe(r).name for r in available_recipes()}  # every packaged recipe is in range


BOMB = """a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
data: {name: tree-r2}
model: {family: mpnn, task: target_node, out_channels: 4, hidden: 8, layers: 1, description: *i}
"""


@pytest.mark.parametrize(("text", "expected"), [
    (BOMB, "anchors and aliases (&name, *name) are not allowed in a recipe"),
    ("data: {name: tree-r2}\nmodel: !!python/object/apply:os.system ['echo hacked']\n",
     "the tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed"),
    ("data: {name: !!binary aGVsbG8=}\n", "the tag 'tag:yaml.org,2002:binary' is not allowed"),
    ("data: {name: !custom tree-r2}\n", "the tag '!custom' is not allowed"),
    ("base: &base {name: tree-r2}\ndata:\n  <<: *base\n", "anchors and aliases"),
])
def test_yaml_aliases_and_tags_are_refused_at_once(tmp_path, capsys, text, expected):
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    assert len(BOMB) < 1600  # expanded, it would hold 9**9 strings: the loader refuses it before building anything
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not (tmp_path / "run").exists()
    with pytest.raises(RecipeError, match="anchors and aliases"):  # overrides are read by the same loader
        load("model.hidden=*x")


@pytest.mark.parametrize("name", ["../../escaped", "/absolute/name", "a/b", "..", ".hidden"])
def test_a_name_is_one_path_component(tmp_path, capsys, name):
    # D3: the name was joined to --out as a path, moving a run (and make_results' reading) outside the folder
    out = tmp_path / "bench"
    assert main(["bench", "--recipes", "gin-tree-r2", "--set", f"name={name}", "--seeds", "0", "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"name: {name!r} is not allowed; it must be one path component" in err[0], err
    assert main(["train", "gin-tree-r2", f"name={name}", "--out", str(tmp_path / "run")]) == 2
    assert "one path component" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["bench"] if out.exists() else [])
    assert not any(p for p in tmp_path.rglob("*") if p.is_file())
    bad = tmp_path / "bad.yaml"  # the name taken from a file name is checked the same way
    bad.write_text(yaml.safe_dump({"data": {"name": "tree-r2"}, "model": json.loads(
        '{"family": "mpnn", "task": "target_node", "out_channels": 4, "hidden": 8, "layers": 1}')}))
    renamed = bad.rename(tmp_path / "-bad.yaml")
    with pytest.raises(RecipeError, match="one path component"):
        load_recipe(renamed)
    assert load_recipe(Path(renamed), [f"name=fine-{len(name)}"]).name == f"fine-{len(name)}"
