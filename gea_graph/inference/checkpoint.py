r"""Reading a training checkpoint into a :class:`~gea_graph.inference.TrainedModel`: the one way to load a trained
model (``gea_graph.load_model``, ``predict``, ``evaluate``, ``export``, ``viz`` and ``diagnose`` all use it).

Safety and portability:

* The file is read with ``torch.load(..., weights_only=True)`` (:func:`gea_graph.train.load_checkpoint`): tensors
  and plain containers only, nothing in it runs. ``map_location`` defaults to ``"cpu"``, so a checkpoint saved on a
  GPU loads on a machine without one.
* The record (:mod:`gea_graph.train.metadata`) is checked: a checkpoint of a newer record format or recipe schema
  than this installation reads is refused in one line naming both gea-graph versions. A checkpoint written before
  checkpoints carried the record gets one derived from its recipe (as this version would have written it) and is
  checked the same way.
* A checkpoint chooses no file: its recipe's ``data.root``, ``data.csv`` and ``data.cls`` are never read here; the
  record names a feature mode, a vocabulary and a PE spec, which are checked against what this code can reproduce.
"""
from __future__ import annotations

import os
from typing import Any

from gea_graph.data.featurizer import FEATURES, Featurizer, FeaturizerError
from gea_graph.models import build_model
from gea_graph.train.metadata import (
    CHECKPOINT_FORMAT,
    RECORD_KEY,
    checkpoint_record,
    installed_versions,
)
from gea_graph.train.recipe import RECIPE_SCHEMA_VERSION, Recipe, RecipeError, recipe_from_dict
from gea_graph.train.run import CheckpointError, load_checkpoint

#: The widths of ``x`` each feature mode gives (what a model's node encoder must read).
_X_WIDTH = {"ogb": 9, "bench": 1}


def _versions(record: dict[str, Any]) -> str:
    versions = record.get("versions") or {}
    return (f"gea-graph {versions.get('gea-graph', '?')} (checkpoint format {record.get('format', '?')}, recipe "
            f"schema {record.get('recipe_schema', '?')})")


def _ours() -> str:
    return (f"gea-graph {installed_versions()['gea-graph']} (checkpoint format {CHECKPOINT_FORMAT}, recipe schema "
            f"{RECIPE_SCHEMA_VERSION})")


def check_record(record: Any, path: str) -> dict[str, Any]:
    r"""The checkpoint's record if this installation reads it; else :class:`CheckpointError` naming both versions."""
    if not isinstance(record, dict):
        raise CheckpointError(f"checkpoint {path!r}: its {RECORD_KEY!r} record is a {type(record).__name__}, not a "
                              f"mapping; it is not a gea-graph checkpoint")
    fmt, schema = record.get("format"), record.get("recipe_schema")
    if not isinstance(fmt, int) or not isinstance(schema, int):
        raise CheckpointError(f"checkpoint {path!r}: its record has no valid format / recipe schema version "
                              f"({fmt!r}, {schema!r}); it is not a gea-graph checkpoint")
    if fmt > CHECKPOINT_FORMAT or schema > RECIPE_SCHEMA_VERSION:
        raise CheckpointError(f"checkpoint {path!r} was written by {_versions(record)}, newer than this "
                              f"{_ours()}: upgrade gea-graph to load it")
    if fmt < CHECKPOINT_FORMAT or schema < RECIPE_SCHEMA_VERSION:
        raise CheckpointError(f"checkpoint {path!r} was written by {_versions(record)}, which this {_ours()} "
                              f"cannot convert: load it with the gea-graph version that wrote it")
    return record


def _recipe(raw: Any, path: str, record: dict[str, Any] | None) -> Recipe:
    if not isinstance(raw, dict):
        raise CheckpointError(f"checkpoint {path!r} holds no recipe in its hyper-parameters; it is not a gea-graph "
                              f"training checkpoint")
    try:
        return recipe_from_dict(raw, f"the recipe of {path}")
    except RecipeError as err:
        written = f"written by {_versions(record)}" if record is not None else "written by an older gea-graph"
        raise CheckpointError(f"checkpoint {path!r} ({written}) has a recipe this {_ours()} cannot read ({err}); "
                              f"load it with the gea-graph version that wrote it") from None


def _check_inputs(featurizer: Featurizer, recipe: Recipe, path: str, legacy: bool) -> None:
    # The node encoder must read what the featurisation gives: a legacy checkpoint of a ZINC model trained on OGB's
    # features before ZINC's default became the 28 types would otherwise be fed the wrong columns.
    if featurizer.inputs != "smiles" or featurizer.features not in FEATURES:
        return
    model = recipe.model
    reads = 9 if model.node_encoder == "atom" else model.node_in
    gives = _X_WIDTH[featurizer.features]
    if reads != gives:
        how = ("it predates the featuriser record; convert it with gea_graph.inference.convert_checkpoint(path, "
               "out, features=...) naming the feature mode it was trained with" if legacy
               else "the checkpoint is inconsistent")
        raise CheckpointError(f"checkpoint {path!r}: its model reads {reads} atom feature columns but its "
                              f"featuriser ({featurizer.dataset}, {featurizer.features!r}) gives {gives}; {how}")


def read_checkpoint(path: str | os.PathLike, map_location: Any = "cpu"):
    r"""The :class:`~gea_graph.inference.TrainedModel` of a training checkpoint (see the module docstring).

    Raises:
        CheckpointError: one line, for a missing, corrupt, foreign, too new or inconsistent checkpoint.
    """
    from gea_graph.inference.model import TrainedModel

    name = str(path)
    ckpt = load_checkpoint(path, map_location=map_location)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"checkpoint {name!r} is not a gea-graph training checkpoint (a "
                              f"{type(ckpt).__name__}, not a mapping)")
    stored = ckpt.get(RECORD_KEY)
    record = check_record(stored, name) if stored is not None else None
    recipe = _recipe((ckpt.get("hyper_parameters") or {}).get("recipe"), name, record)
    if record is None:  # written before checkpoints carried the record: as this version would write it
        record = {**checkpoint_record(recipe), "versions": {}}
    try:
        featurizer = Featurizer.from_dict(record.get("featurizer"), f"checkpoint {name!r}")
    except FeaturizerError as err:
        raise CheckpointError(str(err)) from None
    _check_inputs(featurizer, recipe, name, legacy=stored is None)
    targets = record.get("targets") or {}
    names = targets.get("names")
    if not isinstance(names, list) or len(names) != recipe.model.out_channels:
        raise CheckpointError(f"checkpoint {name!r}: its target names {names!r} do not match the model's "
                              f"{recipe.model.out_channels} outputs")
    if targets.get("scaling") is not None:
        raise CheckpointError(f"checkpoint {name!r} scales its targets ({targets['scaling']!r}), which this "
                              f"{_ours()} cannot undo: load it with the gea-graph version that wrote it")
    state = ckpt.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {name!r} holds no state_dict; it is not a gea-graph training checkpoint")
    model = build_model(recipe.model)
    weights = {key[len("model."):]: value for key, value in state.items() if key.startswith("model.")}
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[-1].strip() if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {name!r}: its weights do not fit the model of its own recipe "
                              f"({first[:200]})") from None
    return TrainedModel(model.eval(), recipe, featurizer, [str(n) for n in names], record, name)


def convert_checkpoint(path: str | os.PathLike, out: str | os.PathLike, features: str | None = None) -> str:
    r"""Writes a copy of a checkpoint saved before checkpoints carried their record (:mod:`gea_graph.train.metadata`)
    with that record, to :obj:`out` (atomically). :obj:`features` sets the feature mode its model was trained with
    (``data.options.features`` of its recipe: ``"ogb"`` or ``"bench"``) where the recipe's default has changed since.
    Returns :obj:`out`."""
    import torch

    from gea_graph.io import exclusive_temporary

    name = str(path)
    ckpt = load_checkpoint(path)
    if RECORD_KEY in ckpt:
        raise CheckpointError(f"checkpoint {name!r} already carries its record; it needs no conversion")
    raw = dict((ckpt.get("hyper_parameters") or {}).get("recipe") or {})
    if features is not None:
        if features not in FEATURES:
            raise ValueError(f"features: {features!r} is not one of {', '.join(FEATURES)}")
        data = dict(raw.get("data") or {})
        data["options"] = {**(data.get("options") or {}), "features": features}
        raw["data"] = data
        ckpt["hyper_parameters"] = {**ckpt["hyper_parameters"], "recipe": raw}
    ckpt[RECORD_KEY] = checkpoint_record(_recipe(raw, name, None))
    with exclusive_temporary(out) as tmp:
        torch.save(ckpt, tmp)
    return str(out)
