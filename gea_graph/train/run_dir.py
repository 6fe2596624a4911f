r"""A run directory's recipe and summary: which recipe changes a run survives (resume, bench siblings), the check
that a directory holds a run of the same recipe, and reading its ``result.json``."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from gea_graph.train.recipe import Recipe, RecipeError, load_yaml, recipe_from_dict

RESULT_FILE = "result.json"
RECIPE_FILE = "recipe.yaml"
#: Recipe keys that may differ between a run and its resumption: they change neither the model nor its training.
RESUMABLE_CHANGES = ("name", "description", "paper", "sweep", "trainer.max_time", "trainer.num_workers",
                     "trainer.log_every_n_steps", "trainer.seeds", "trainer.compile", "trainer.fixed_size",
                     "trainer.eval_train", "trainer.release_memory_every", "trainer.release_memory_above",
                     "model.attn_impl", "data.on_device")


def _flat(raw: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(raw, dict):
        out: dict[str, Any] = {}
        for key, value in raw.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: raw}


def recipe_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    r"""The dotted keys whose values differ between two recipes (as plain dictionaries), ignoring
    :data:`RESUMABLE_CHANGES`, as ``"key: old -> new"``."""
    a, b = _flat(old), _flat(new)
    changes = []
    for key in sorted(set(a) | set(b)):
        if any(key == i or key.startswith(f"{i}.") for i in RESUMABLE_CHANGES):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            changes.append(f"{key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return changes


def recipe_digest(recipe: dict[str, Any]) -> str:
    r"""A digest of a recipe (a plain dictionary) that ignores :data:`RESUMABLE_CHANGES`: two recipes with the same
    digest train the same model the same way (their time caps aside)."""
    flat = {k: v for k, v in _flat(recipe).items()
            if not any(k == i or k.startswith(f"{i}.") for i in RESUMABLE_CHANGES)}
    return hashlib.sha1(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:10]


def check_run_dir(run_dir: str | os.PathLike, recipe: Recipe) -> None:
    r"""Raises :class:`RecipeError` when ``run_dir`` holds a run of a different recipe than ``recipe`` (its
    ``recipe.yaml`` differs outside :data:`RESUMABLE_CHANGES`): such a run can neither be resumed nor counted as a
    result of ``recipe``."""
    path = Path(run_dir) / RECIPE_FILE
    if not path.is_file():
        return
    try:
        stored = load_yaml(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except RecipeError:
        stored = None
    if not isinstance(stored, dict):
        raise RecipeError(f"{path} is not a recipe; delete {run_dir} or choose another --out")
    _refuse_changes(run_dir, stored, recipe)


def _with_defaults(stored: dict[str, Any]) -> dict[str, Any]:
    # A key the stored recipe lacks was added to the schema since; its default keeps the old behaviour (e.g.
    # trainer.deterministic: false), so it counts as that default.
    try:
        return recipe_from_dict(stored).to_dict()
    except (ValueError, TypeError):
        return stored


def _refuse_changes(run_dir: str | os.PathLike, stored: dict[str, Any], recipe: Recipe) -> None:
    changes = recipe_changes(_with_defaults(stored), recipe.to_dict())
    if changes:
        more = f" and {len(changes) - 3} more" if len(changes) > 3 else ""
        raise RecipeError(f"{run_dir} holds a run of a different recipe ({'; '.join(changes[:3])}{more}); "
                          f"use the recipe and overrides it was trained with, or choose another --out")



def read_result(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    r"""The summary of a complete run, or ``None`` (no ``result.json``, an unreadable one, or one of a run that
    finished no epoch, which older versions wrote)."""
    path = Path(run_dir) / RESULT_FILE
    try:
        result = json.loads(path.read_text()) if path.is_file() else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(result, dict) or not isinstance(result.get("epochs"), int) or result["epochs"] < 1:
        return None
    return result
