r"""Checkpoints: the one module that writes and reads them, for training (``--resume``) and inference
(``gea_graph.load_model``, ``predict``, ``evaluate``, ``export``, ``viz``, ``diagnose``) alike.

A checkpoint is Lightning's dictionary (``state_dict``, ``hyper_parameters["recipe"]``, loops, optimiser states)
plus, under :data:`RECORD_KEY`, the record of what the model needs besides its weights (plain types only)::

    format          CHECKPOINT_FORMAT, the version of this record
    versions        gea-graph, torch, torch_geometric and rdkit that trained the model
    recipe_schema   RECIPE_SCHEMA_VERSION of gea_graph.train.recipe (the recipe itself is the hyper-parameters)
    task            the model's task
    featurizer      gea_graph.data.Featurizer.to_dict(): inputs, feature mode, vocabulary, PE spec
    targets         {"names": [...], "scaling": None}: the outputs' names and the scaling applied to the targets in
                    training (none: predictions are in the targets' own units)
    weights_sha256  the digest of the weights (:func:`weights_digest`), added by :func:`save_checkpoint`

Writing (:func:`save_checkpoint`, which Lightning reaches through :class:`AtomicCheckpointIO`): the digest of the
weights is stamped into the record, and the file is written to a temporary beside it and renamed into place.

Reading (:func:`load_checkpoint`, then :func:`read_model` for a trained model), every refusal one line naming the
file and the field:

* ``torch.load(..., weights_only=True)`` only: tensors and plain containers, nothing in the file runs; torch's
  advice to retry unsafely is never passed on. ``map_location`` defaults to ``"cpu"``.
* The weights' digest is recomputed and compared (torch does not check the zip's checksums: flipped bytes would
  otherwise load silently). A checkpoint written before checkpoints carried a digest loads with a
  :class:`UncheckedWeightsWarning`, as its weights cannot be checked.
* The record: a newer record format or recipe schema than this installation reads is refused naming both
  gea-graph versions; a checkpoint written before the record gets one derived from its recipe. The recorded PE
  spec must be a string and must give what the model reads (``rw:8`` for an RWPE-16 model is refused).
* The recorded sizes (every size of the recipe's ``model`` section) are compared with the weights' shapes before
  the model is built: the expected shapes come from the model built on the ``meta`` device (no memory), after the
  layer count was compared with the weights' layers, so a small file cannot make the loader allocate what its
  recipe claims.
* A checkpoint chooses no file: its recipe's ``data.root``, ``data.csv`` and ``data.cls`` are never read here.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import rdkit
import torch
import torch_geometric
from lightning.fabric.plugins import TorchCheckpointIO
from torch import nn

import gea_graph
from gea_graph.data.featurizer import FEATURES, Featurizer, FeaturizerError, target_names
from gea_graph.data.molecules import FEATURE_WIDTHS
from gea_graph.io import exclusive_temporary
from gea_graph.models import build_model
from gea_graph.train.recipe import RECIPE_SCHEMA_VERSION, Recipe, RecipeError, recipe_from_dict

#: Version of the ``"gea_graph"`` record of a checkpoint (``weights_sha256`` is optional within it).
CHECKPOINT_FORMAT = 1
#: The checkpoint key of the record.
RECORD_KEY = "gea_graph"
#: The record's key of the weights' digest.
DIGEST_KEY = "weights_sha256"
#: The prefix of the network's weights in a training checkpoint's ``state_dict`` (``GraphTask.model``).
MODEL_PREFIX = "model."


class CheckpointError(RuntimeError):
    r"""A checkpoint that cannot be read (missing, truncated, corrupt, tampered with, inconsistent or not a
    plain-types checkpoint)."""


class CheckpointWriteError(OSError):
    r"""A checkpoint that could not be written (a full disk, a file-size limit); the one before it is intact."""


class UncheckedWeightsWarning(UserWarning):
    r"""A checkpoint without a digest of its weights (written before checkpoints carried one): it loads, unchecked."""


# -- the record ---------------------------------------------------------------------------------------------------
def installed_versions() -> dict[str, str]:
    r"""The versions of the libraries a trained model depends on, as plain strings (``torch.__version__`` is a
    ``TorchVersion``, which a weights-only load refuses)."""
    return {"gea-graph": str(gea_graph.__version__), "torch": str(torch.__version__),
            "torch_geometric": str(torch_geometric.__version__), "rdkit": str(rdkit.__version__)}


def featurizer_of(recipe: Recipe) -> Featurizer:
    r"""The featurisation of a recipe's data (:meth:`gea_graph.data.Featurizer.of_data`)."""
    data = recipe.data
    return Featurizer.of_data(data.name, data.csv, data.cls, data.options, data.pe)


def checkpoint_record(recipe: Recipe) -> dict[str, Any]:
    r"""The record a checkpoint of :obj:`recipe`'s model keeps (see the module docstring; the digest of the
    weights is added when the checkpoint is written)."""
    data = recipe.data
    names = target_names(data.name, data.options if data.csv is not None else None, recipe.model.out_channels)
    return {"format": CHECKPOINT_FORMAT, "versions": installed_versions(), "recipe_schema": RECIPE_SCHEMA_VERSION,
            "task": recipe.model.task, "featurizer": featurizer_of(recipe).to_dict(),
            "targets": {"names": names, "scaling": None}}


def weights_digest(state: Mapping[str, Any]) -> str:
    r"""SHA-256 over the weights in ``state_dict`` order: each entry's name, dtype, shape and bytes (a value that
    is not a tensor: its ``repr``)."""
    digest = hashlib.sha256()
    for key, value in state.items():
        digest.update(f"{key}\0".encode())
        if isinstance(value, torch.Tensor):
            tensor = value.detach().to("cpu").contiguous().reshape(-1)
            digest.update(f"{tensor.dtype}{tuple(value.shape)}\0".encode())
            digest.update(memoryview(tensor.view(torch.uint8).numpy()))
        else:
            digest.update(f"{value!r}\0".encode())
    return digest.hexdigest()


# -- writing ------------------------------------------------------------------------------------------------------
def save_checkpoint(checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
    r"""Writes :obj:`checkpoint` to :obj:`path`: the digest of its weights stamped into its record (when it has
    both), written to a temporary file in the same folder and renamed into place (a kill never leaves a
    half-written checkpoint).

    Raises:
        CheckpointWriteError: one line naming the file, the reason and the free space; the previous file is intact.
    """
    path = Path(path)
    record, state = checkpoint.get(RECORD_KEY), checkpoint.get("state_dict")
    if isinstance(record, dict) and isinstance(state, Mapping):
        checkpoint[RECORD_KEY] = {**record, DIGEST_KEY: weights_digest(state)}
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with exclusive_temporary(path) as tmp:
            torch.save(checkpoint, tmp)
    except (OSError, RuntimeError) as err:  # torch's zip writer reports a full disk as a RuntimeError
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        free = shutil.disk_usage(path.parent).free
        raise CheckpointWriteError(
            f"could not write the checkpoint {path} ({reason}; {free / 2 ** 20:,.0f} MiB free on that disk); "
            f"the previous checkpoint is intact: free some space, then continue with --resume") from None


class AtomicCheckpointIO(TorchCheckpointIO):
    r"""Lightning's checkpoint IO through this module: writes with :func:`save_checkpoint` (digest, atomic
    rename), reads with :func:`load_checkpoint` (weights only, digest checked)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        save_checkpoint(checkpoint, path)

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        return load_checkpoint(path, map_location if map_location is not None else "cpu")


# -- reading ------------------------------------------------------------------------------------------------------
def _load_failure(err: Exception) -> str:
    # torch's message for a refused global recommends retrying with weights_only=False, the unsafe load just
    # refused: only the name of the refused object is kept.
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    if "weights_only" in text or "Weights only load failed" in text:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text) or \
            re.search(r"Unsupported operand (\d+)", text)
        what = f" ({found.group(1)})" if found else ""
        return f"it holds a Python object{what} that a safe, weights-only load refuses to run"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(err).__name__}: {first[:200]}" if first else type(err).__name__


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    r"""The checkpoint at :obj:`path`, read with ``torch.load(..., weights_only=True)``, its weights checked
    against the digest in its record (a checkpoint without one loads with an :class:`UncheckedWeightsWarning`).

    Raises:
        CheckpointError: one line naming the file, for a missing, unreadable, unsafe or corrupted one.
    """
    name = str(path)
    if not Path(path).is_file():
        raise CheckpointError(f"checkpoint {name!r} does not exist")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 -- garbage makes torch's unpickler raise anything (KeyError: 101, ...)
        raise CheckpointError(f"checkpoint {name!r} is corrupt or not a gea-graph checkpoint "
                              f"({_load_failure(err)})") from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"checkpoint {name!r} is not a gea-graph checkpoint (a {type(ckpt).__name__}, not a "
                              f"mapping)")
    record, state = ckpt.get(RECORD_KEY), ckpt.get("state_dict")
    if isinstance(record, dict) and isinstance(state, dict):
        recorded = record.get(DIGEST_KEY)
        if recorded is None:
            warnings.warn(f"checkpoint {name!r} carries no digest of its weights (written before gea-graph recorded "
                          f"one): its weights cannot be checked for corruption", UncheckedWeightsWarning,
                          stacklevel=2)
        elif not isinstance(recorded, str):
            raise CheckpointError(f"checkpoint {name!r}: its field {RECORD_KEY}.{DIGEST_KEY} is a "
                                  f"{type(recorded).__name__}, not a digest")
        elif weights_digest(state) != recorded:
            raise CheckpointError(f"checkpoint {name!r} is corrupted: its weights do not match the digest recorded "
                                  f"when it was written ({RECORD_KEY}.{DIGEST_KEY}); use an intact copy")
    elif record is None and isinstance(state, dict):
        warnings.warn(f"checkpoint {name!r} carries no record and no digest of its weights (written before "
                      f"gea-graph recorded them): its weights cannot be checked for corruption",
                      UncheckedWeightsWarning, stacklevel=2)
    return ckpt


def check_weights_fit(path: str | os.PathLike, state: Any, expected: Mapping[str, torch.Tensor],
                      prefix: str = "", sizes: Mapping[str, Any] | None = None, how: str = "") -> None:
    r"""Raises :class:`CheckpointError` unless the tensors of :obj:`state` whose names start with :obj:`prefix`
    have exactly the names and shapes of :obj:`expected` (a model's ``state_dict``, e.g. built on the ``meta``
    device); :obj:`sizes` (recipe key -> recorded value) are named where one explains the first mismatch;
    :obj:`how` ends the message (what to do)."""
    name = str(path)
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {name!r} holds no state_dict; it is not a gea-graph training checkpoint")
    own = {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}
    missing, extra = [k for k in expected if k not in own], [k for k in own if k not in expected]
    if missing or extra:
        first = f"{prefix}{missing[0]} missing" if missing else f"{prefix}{extra[0]} unexpected"
        raise CheckpointError(f"checkpoint {name!r}: its weights do not fit the model of its recipe ({first}, "
                              f"{len(missing)} missing, {len(extra)} unexpected){how}")
    wrong = [(key, want, tuple(own[key].shape) if isinstance(own[key], torch.Tensor) else None)
             for key, want in expected.items()
             if not isinstance(own[key], torch.Tensor) or tuple(own[key].shape) != tuple(want.shape)]
    if wrong:
        # the recorded sizes found in the recipe's shapes but not in the file's, over every mismatching weight
        named = [f"{k}={v}" for k, v in (sizes or {}).items()
                 if any(v in tuple(want.shape) and (shape is None or v not in shape) for _, want, shape in wrong)]
        key, want, shape = wrong[0]
        field = f"its recorded {', '.join(named)} " if named else "its recipe "
        raise CheckpointError(f"checkpoint {name!r}: {field}does not match its weights ({prefix}{key} is "
                              f"{list(shape) if shape is not None else type(own[key]).__name__} in the file, "
                              f"{list(want.shape)} by the recipe){how}")


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
    except (RecipeError, ValueError, TypeError) as err:
        written = f"written by {_versions(record)}" if record is not None else "written by an older gea-graph"
        raise CheckpointError(f"checkpoint {path!r} ({written}) has a recipe this {_ours()} cannot read ({err}); "
                              f"load it with the gea-graph version that wrote it") from None


def _featurizer(record: dict[str, Any], recipe: Recipe, path: str) -> Featurizer:
    raw = record.get("featurizer")
    pe = raw.get("pe") if isinstance(raw, dict) else None
    if pe is not None and not isinstance(pe, str):
        raise CheckpointError(f"checkpoint {path!r}: its field {RECORD_KEY}.featurizer.pe is {pe!r} (a "
                              f"{type(pe).__name__}), not a PE spec such as 'rw:16' or 'lap:8'")
    try:
        featurizer = Featurizer.from_dict(raw, f"checkpoint {path!r}")
    except FeaturizerError as err:
        raise CheckpointError(str(err)) from None
    # The recipe's own checks of its data's PE spec against its model (model.pe size, Graphormer distances), on
    # the spec the inputs will be featurised with.
    try:
        replace(recipe, data=replace(recipe.data, pe=featurizer.pe))
    except (RecipeError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path!r}: its recorded PE spec {RECORD_KEY}.featurizer.pe="
                              f"{featurizer.pe!r} does not fit its model ({str(err).splitlines()[0]})") from None
    return featurizer


def _check_inputs(featurizer: Featurizer, recipe: Recipe, path: str, legacy: bool) -> None:
    # The node encoder must read what the featurisation gives: a legacy checkpoint of a ZINC model trained on OGB's
    # features before ZINC's default became the 28 types would otherwise be fed the wrong columns.
    if featurizer.inputs != "smiles" or featurizer.features not in FEATURES:
        return
    model = recipe.model
    reads = FEATURE_WIDTHS["ogb"][0] if model.node_encoder == "atom" else model.node_in
    gives = FEATURE_WIDTHS[featurizer.features][0]
    if reads != gives:
        how = ("it predates the featuriser record; convert it with gea_graph.inference.convert_checkpoint(path, "
               "out, features=...) naming the feature mode it was trained with" if legacy
               else "the checkpoint is inconsistent")
        raise CheckpointError(f"checkpoint {path!r}: its model reads {reads} atom feature columns but its "
                              f"featuriser ({featurizer.dataset}, {featurizer.features!r}) gives {gives}; {how}")


def _recorded_sizes(recipe: Recipe) -> dict[str, int]:
    # the integer sizes of the model section, as recipe keys (model.hidden, model.pe.dim, ...)
    out = {}
    for key, value in recipe.to_dict()["model"].items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, item in items:
            if isinstance(item, int) and not isinstance(item, bool) and item > 1:
                out[f"model.{key}" + (f".{sub}" if sub else "")] = item
    return out


def _layer_stack(recipe: Recipe) -> str | None:
    # The name of the module list that holds one entry per model.layers (``layers``, ``convs``, ...): the keys a
    # second layer adds, on the meta device.
    keys = []
    for count in (1, 2):
        with torch.device("meta"):
            keys.append(set(build_model(replace(recipe.model, layers=count)).state_dict()))
    found = {m.group(1) for m in map(re.compile(r"^(.*?)\.1\.").match, keys[1] - keys[0]) if m}
    return found.pop() if len(found) == 1 else None


def _check_sizes(recipe: Recipe, state: Any, path: str) -> None:
    # The layer count first (building thousands of layers takes long even on the meta device), then every shape
    # from the model built on the meta device: nothing the recipe claims is allocated before it matches the file.
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path!r} holds no state_dict; it is not a gea-graph training checkpoint")
    try:
        stack = _layer_stack(recipe)
        if stack is not None:
            pattern = re.compile(rf"^{re.escape(MODEL_PREFIX + stack)}\.(\d+)\.")
            found = {int(m.group(1)) for m in map(pattern.match, state) if m}
            if len(found) != recipe.model.layers:
                raise CheckpointError(f"checkpoint {path!r}: its recorded model.layers={recipe.model.layers} does "
                                      f"not match its weights, which hold {len(found)} layers")
        with torch.device("meta"):
            expected = build_model(recipe.model).state_dict()
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 -- a recipe from a file may make any constructor fail
        raise CheckpointError(f"checkpoint {path!r}: its recipe builds no model ({type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''})") from None
    check_weights_fit(path, state, expected, MODEL_PREFIX, _recorded_sizes(recipe))


@dataclass
class LoadedModel:
    r"""What :func:`read_model` reads from a training checkpoint: the network (eval mode), its recipe, its
    featurisation, its output names and its record."""

    model: nn.Module
    recipe: Recipe
    featurizer: Featurizer
    target_names: list[str]
    record: dict[str, Any]


def read_model(path: str | os.PathLike, map_location: Any = "cpu") -> LoadedModel:
    r"""The trained network of a ``gea-graph train`` checkpoint and what it needs to be used, every check of the
    module docstring passed.

    Raises:
        CheckpointError: one line, for a missing, corrupt, foreign, too new or inconsistent checkpoint.
    """
    name = str(path)
    ckpt = load_checkpoint(path, map_location=map_location)
    stored = ckpt.get(RECORD_KEY)
    record = check_record(stored, name) if stored is not None else None
    recipe = _recipe((ckpt.get("hyper_parameters") or {}).get("recipe"), name, record)
    if record is None:  # written before checkpoints carried the record: as this version would write it
        record = {**checkpoint_record(recipe), "versions": {}}
    featurizer = _featurizer(record, recipe, name)
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
    _check_sizes(recipe, state, name)
    model = build_model(recipe.model)
    weights = {key[len(MODEL_PREFIX):]: value for key, value in state.items() if key.startswith(MODEL_PREFIX)}
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[-1].strip() if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {name!r}: its weights do not fit the model of its own recipe "
                              f"({first[:200]})") from None
    return LoadedModel(model.eval(), recipe, featurizer, [str(n) for n in names], record)


def convert_checkpoint(path: str | os.PathLike, out: str | os.PathLike, features: str | None = None) -> str:
    r"""Writes a copy of a checkpoint saved before checkpoints carried their record, with that record (and the
    digest of its weights), to :obj:`out` (atomically). :obj:`features` sets the feature mode its model was trained
    with (``data.options.features`` of its recipe: ``"ogb"`` or ``"bench"``) where the recipe's default has changed
    since. Returns :obj:`out`."""
    name = str(path)
    with warnings.catch_warnings():  # it has no digest: that is why it is converted
        warnings.simplefilter("ignore", UncheckedWeightsWarning)
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
    save_checkpoint(ckpt, out)
    return str(out)
