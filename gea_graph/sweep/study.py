r"""A sweep's studies: one Optuna study per recipe, named ``<study>:<recipe>``, created or joined with the settings
that make its trials comparable.

Every study records (as user attributes) the sweep's recipes, the search space, the time and parameter caps and the
overrides. A worker joining a study with other settings is refused, naming the difference: trials under different
budgets are never ranked together, and one study name never holds two sweeps of different recipes.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler, TPESampler
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from gea_graph.sweep.space import check_space, distribution_json, recipe_space
from gea_graph.train.recipe import Recipe, load_recipe, resolve_recipe

#: The user attribute of a study that holds the sweep's settings.
SETTINGS_ATTR = "gea_graph_sweep"
#: Trial states that count towards ``--trials``.
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
PRUNERS = ("median", "hyperband", "none")
SAMPLERS = ("tpe", "random")


class StudyMismatchError(ValueError):
    r"""A study name already used by a sweep of other recipes or settings."""


@dataclass
class Target:
    r"""One recipe of a sweep: its file, its recipe (with the sweep's overrides), its space and its study."""

    path: Path
    recipe: Recipe
    space: dict[str, BaseDistribution]
    study_name: str
    metric: str
    higher_is_better: bool

    @property
    def name(self) -> str:
        return self.recipe.name

    @property
    def direction(self) -> str:
        return "maximize" if self.higher_is_better else "minimize"


@dataclass
class Settings:
    r"""What every worker of a sweep must share (recorded in each study; see :func:`check_settings`)."""

    recipes: list[str]
    trials: int
    max_time: float | None
    max_params: int | None
    overrides: list[str] = field(default_factory=list)
    pruner: str = "median"
    sampler: str = "tpe"

    def record(self, target: Target) -> dict[str, Any]:
        return {"recipes": sorted(self.recipes), "space": distribution_json(target.space),
                "max_time_min": self.max_time, "max_params": self.max_params, "overrides": list(self.overrides),
                "pruner": self.pruner, "sampler": self.sampler, "metric": target.metric}


def plan_targets(specs: Sequence[str], study: str, overrides: Sequence[str], space_file: str | None) -> list[Target]:
    r"""The recipes of a sweep, each read, its space parsed and checked against it (:class:`~gea_graph.sweep.space.
    SpaceError` naming the key), and its metric's direction resolved. Nothing is written."""
    from gea_graph.train.metrics import HIGHER_IS_BETTER, resolve_task

    targets: list[Target] = []
    for spec in specs:
        path = resolve_recipe(spec)
        recipe = load_recipe(path, overrides)
        if any(t.name == recipe.name for t in targets):
            raise ValueError(f"two recipes of the sweep are named {recipe.name!r}; give one another name (name: key)")
        source = f"recipe {path}" if space_file is None else f"--space {space_file}"
        space = recipe_space(recipe, space_file, source)
        check_space(path, space, overrides, source)
        _, metric = resolve_task(recipe.model, recipe.trainer.loss, recipe.trainer.metric)
        targets.append(Target(path, recipe, space, f"{study}:{recipe.name}", metric, HIGHER_IS_BETTER[metric]))
    return targets


def check_settings(storage: optuna.storages.BaseStorage, study: str, targets: Sequence[Target],
                   settings: Settings) -> None:
    r"""Refuses (:class:`StudyMismatchError`) a sweep whose study name is taken by a sweep of other recipes, or whose
    studies were searched under other settings (space, caps, overrides, pruner, sampler, direction)."""
    mine = {t.study_name: t for t in targets}
    for summary in storage.get_all_studies():
        name = summary.study_name
        if not name.startswith(f"{study}:"):
            continue
        stored = summary.user_attrs.get(SETTINGS_ATTR)
        if stored is None and not storage.get_n_trials(storage.get_study_id_from_name(name)):
            continue  # another worker is creating it at this moment (its settings follow)
        if not isinstance(stored, dict):
            raise StudyMismatchError(f"the storage holds a study {name!r} that no gea-graph sweep made; choose "
                                     f"another --study")
        if stored.get("recipes") != sorted(settings.recipes):
            raise StudyMismatchError(f"study {study!r} is a sweep of {', '.join(stored.get('recipes') or [])}, not "
                                     f"of {', '.join(sorted(settings.recipes))}; choose another --study")
        target = mine[name]
        if summary.direction != StudyDirection[target.direction.upper()]:
            raise StudyMismatchError(f"study {name!r} {summary.direction.name.lower()}s its metric, this sweep "
                                     f"would {target.direction} it; choose another --study")
        wanted = settings.record(target)
        for key, value in wanted.items():
            if stored.get(key) != value:
                raise StudyMismatchError(f"study {name!r} was searched with {_show(key, stored.get(key))}, this "
                                         f"sweep gives {_show(key, value)}: its trials would not compare; give the "
                                         f"same settings, or another --study")


#: How :func:`check_settings` names a recorded setting.
SETTING_NAMES = {"space": "the search space", "max_time_min": "--max-time", "max_params": "--max-params",
                 "overrides": "--set", "pruner": "--pruner", "sampler": "--sampler", "metric": "the metric"}


def _show(key: str, value: Any) -> str:
    if key == "space" and isinstance(value, dict):
        value = "{" + "; ".join(f"{k}: {v}" for k, v in sorted(value.items())) + "}"
    elif key == "max_time_min" and value is not None:
        value = f"{value:g} min"
    return f"{SETTING_NAMES.get(key, key)} {'none' if value is None else value}"


def open_study(storage: optuna.storages.BaseStorage, target: Target, settings: Settings,
               seed: int | None) -> optuna.Study:
    r"""Creates or joins the study of :obj:`target` (its settings recorded at creation; a race with another worker
    creating it at the same moment ends in both joining it)."""
    study = optuna.create_study(storage=storage, study_name=target.study_name, direction=target.direction,
                                sampler=make_sampler(settings.sampler, seed), pruner=make_pruner(settings.pruner),
                                load_if_exists=True)
    if SETTINGS_ATTR not in study.user_attrs:
        study.set_user_attr(SETTINGS_ATTR, settings.record(target))
    return study


def make_pruner(name: str) -> optuna.pruners.BasePruner:
    r"""Optuna's pruner of ``--pruner``: the median rule (after 5 finished trials, from the second epoch on),
    Hyperband (its resource is the epoch), or none."""
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1)
    return optuna.pruners.NopPruner()


def make_sampler(name: str, seed: int | None) -> BaseSampler:
    r"""TPE (default) or random sampling; with a seed, each trial draws from a generator seeded by the seed and the
    trial's number (:class:`TrialSeededSampler`)."""
    make = (lambda s: TPESampler(seed=s)) if name == "tpe" else (lambda s: RandomSampler(seed=s))
    return make(None) if seed is None else TrialSeededSampler(make, seed)


class TrialSeededSampler(BaseSampler):
    r"""An Optuna sampler whose random draws for trial ``n`` come from a generator seeded by ``(seed, n)``.

    Workers started at the same moment with the same ``--seed`` would otherwise draw the same parameters (each its
    own generator, seeded alike); here they draw different ones, as trials of different numbers, and a sweep run by
    one worker repeats exactly. What a trial draws still depends on the trials finished before it (TPE)."""

    def __init__(self, make, seed: int) -> None:
        self._make = make
        self._seed = seed
        self._inner = make(seed)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        digest = hashlib.sha256(f"{self._seed}:{trial.number}".encode()).digest()
        self._inner = self._make(int.from_bytes(digest[:4], "little"))
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()


def counts(study: optuna.Study) -> dict[TrialState, int]:
    r"""The number of trials of :obj:`study` in each state."""
    out = dict.fromkeys(TrialState, 0)
    for trial in study.get_trials(deepcopy=False):
        out[trial.state] += 1
    return out


def host() -> str:
    r"""This machine's name (recorded with each trial: a shared storage's trials train on several machines)."""
    return os.uname().nodename
