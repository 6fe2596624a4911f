r"""A sweep worker: runs trials of each recipe's study until it holds ``--trials`` finished ones.

A trial is a normal run of :func:`gea_graph.train.fit` in ``DIR/<recipe>/trial<number>/`` (``recipe.yaml``,
checkpoints, ``metrics.csv``, and ``result.json`` once complete), trained with the recipe's first seed and the
trial's drawn values as overrides. Before it trains, the drawn values pass the recipe's checks and its model is built
and counted (over ``--max-params``: pruned, with the reason). Each epoch's validation metric goes to the study, and
Optuna's pruner may end the trial there (optuna-integration's
:class:`~optuna_integration.PyTorchLightningPruningCallback`). While a trial runs, the worker's heartbeat is in the
storage; a worker killed mid-trial stops beating, and the next worker to start a trial fails it and enqueues it again
with its values (:class:`~optuna.storages.RetryFailedTrialCallback`). A trial counts once, whoever runs it.
"""
from __future__ import annotations

import gc
import logging
import math
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import FrozenTrial, Trial, TrialState

from gea_graph.sweep.space import trial_recipe
from gea_graph.sweep.study import FINISHED, Settings, Target, counts, host, open_study

#: Trials that fail one after another before a worker gives up (a broken dataset would fail every trial).
MAX_FAILURES_IN_A_ROW = 3


class SurplusTrial(Exception):
    r"""A trial started while the study already held its ``--trials`` (another worker's trial finished first)."""


class _QuietSurplus(logging.Filter):
    r"""Drops Optuna's two warnings on a surplus trial (its traceback and "failed with value None"): a surplus is
    how two workers settle the last trial, not an error, and trials.csv gives its reason."""

    def __init__(self) -> None:
        super().__init__()
        self.numbers: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        words = record.getMessage().split(" ", 2)
        number = int(words[1]) if len(words) > 2 and words[0] == "Trial" and words[1].isdigit() else None
        if record.exc_info and isinstance(record.exc_info[1], SurplusTrial):
            if number is not None:
                self.numbers.add(number)
            return False
        return not (number in self.numbers and words[2].startswith("failed with value"))


def quiet_surplus() -> None:
    r"""Installs :class:`_QuietSurplus` on the logger of Optuna's ``optimize`` (once a process)."""
    logger = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, _QuietSurplus) for f in logger.filters):
        logger.addFilter(_QuietSurplus())


def suggest(trial: Trial, key: str, dist: Any) -> Any:
    r"""The trial's value of :obj:`key` from its distribution (Optuna's ``suggest_*``)."""
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, list(dist.choices))
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)


def run_folder(out: Path, target: Target, number: int) -> Path:
    r"""The run folder of trial :obj:`number` of :obj:`target`."""
    return out / target.name / f"trial{number:04d}"


class Objective:
    r"""Trains one trial of :obj:`target` (see the module docstring) and returns its best validation metric."""

    def __init__(self, target: Target, settings: Settings, out: Path, overrides: Sequence[str]) -> None:
        self.target, self.settings, self.out, self.overrides = target, settings, out, list(overrides)
        #: the number of the trial this worker ran last
        self.last: int | None = None

    def __call__(self, trial: Trial) -> float:
        from gea_graph.train import fit

        target, settings = self.target, self.settings
        self.last = trial.number
        ahead = [t for t in trial.study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
                 if t.state != TrialState.RUNNING or t.number < trial.number]
        if len(ahead) >= settings.trials:
            trial.set_user_attr("reason", f"surplus: the study already held {settings.trials} trials")
            raise SurplusTrial(f"the study already holds {settings.trials} trials")
        params = {key: suggest(trial, key, dist) for key, dist in target.space.items()}
        trial.set_user_attr("host", host())
        try:
            recipe, n_params = trial_recipe(target.path, params, self.overrides)
        except (ValueError, TypeError, KeyError) as err:  # a combination of values the recipe refuses
            trial.set_user_attr("reason", f"recipe check: {' '.join(str(err).split())}")
            raise optuna.TrialPruned(f"the drawn values do not fit the recipe: {err}") from None
        trial.set_user_attr("params", n_params)
        if settings.max_params is not None and n_params > settings.max_params:
            trial.set_user_attr("reason", f"{n_params:,} parameters > --max-params {settings.max_params:,}")
            raise optuna.TrialPruned(f"{n_params:,} parameters, over --max-params {settings.max_params:,}")
        run_dir = run_folder(self.out, target, trial.number)
        trial.set_user_attr("run_dir", str(run_dir.relative_to(self.out)))
        from optuna_integration import PyTorchLightningPruningCallback

        pruning = PyTorchLightningPruningCallback(trial, monitor="val/metric")
        seed = recipe.trainer.seeds[0]
        trial.set_user_attr("seed", seed)
        try:
            result = fit(recipe, run_dir, seed=seed, max_time=settings.max_time, progress=False,
                         callbacks=[pruning], verbose=False)
        except optuna.TrialPruned:
            trial.set_user_attr("reason", "pruned by the pruner at an epoch end")
            raise
        except Exception as err:
            trial.set_user_attr("reason", f"{type(err).__name__}: {' '.join(str(err).split())}"[:500])
            raise
        finally:
            gc.collect()
        if result is None:
            raise RuntimeError(f"{run_dir}: the run was interrupted")
        trial.set_user_attr("epochs", result["epochs"])
        trial.set_user_attr("test", result["test"])
        trial.set_user_attr("train_time_s", result["train_time_s"])
        trial.set_user_attr("best_epoch", result["best_epoch"])
        return float(result["val"])


def progress_line(study: optuna.Study, trial: FrozenTrial, target: Target, total: int) -> str:
    r"""One line on a finished trial: its state, metric, epochs, time, parameter count and values."""
    done = sum(counts(study)[s] for s in FINISHED)
    seconds = (trial.datetime_complete - trial.datetime_start).total_seconds() \
        if trial.datetime_complete and trial.datetime_start else math.nan
    epochs = trial.user_attrs.get("epochs", len(trial.intermediate_values))
    head = f"[{target.name} {done}/{total}] trial {trial.number}: {trial.state.name.lower()}"
    if trial.state == TrialState.COMPLETE:
        head += f", val {target.metric} {trial.value:.4f}"
        try:
            best = study.best_trial
            head += f" (best {best.value:.4f}, trial {best.number})"
        except ValueError:
            pass
    elif trial.user_attrs.get("reason"):
        head += f" ({trial.user_attrs['reason']})"
    n_params = trial.user_attrs.get("params")
    values = " ".join(f"{k}={_short(v)}" for k, v in trial.params.items())
    return (f"{head}, {epochs} epochs, {seconds:.0f} s"
            + (f", {n_params:,} params" if isinstance(n_params, int) else "") + f"; {values}")


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def work(storage: optuna.storages.BaseStorage, targets: Sequence[Target], settings: Settings, out: Path,
         seed: int | None, overrides: Sequence[str], log: Callable[[str], None] = print,
         poll: float = 5.0) -> bool:
    r"""Runs trials of each target's study until it holds ``settings.trials`` finished ones. While a study's last
    trials run elsewhere it searches the other studies, then comes back to wait for them (or to retry one failed as
    stale). Returns ``False`` when a target's trials
    failed :data:`MAX_FAILURES_IN_A_ROW` times in a row (the worker gives up on it; the error is logged)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_surplus()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # a line per trial, not Lightning's per run
    healthy = True
    queue = deque(targets)
    failures = {target.name: 0 for target in targets}
    idle_visits = 0  # visits in a row to studies whose last trials all run elsewhere
    waiting_said: set[str] = set()
    while queue:
        target = queue.popleft()
        study = open_study(storage, target, settings, seed)
        objective = Objective(target, settings, out, overrides)
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
            state = counts(study)
            finished = sum(state[s] for s in FINISHED)
            if finished >= settings.trials:
                break
            if finished + state[TrialState.RUNNING] >= settings.trials and not state[TrialState.WAITING]:
                # Its last trials run elsewhere: search the other studies meanwhile, and come back to this one
                # (a stale trial is failed and retried here).
                if target.name not in waiting_said:
                    waiting_said.add(target.name)
                    log(f"[{target.name} {finished}/{settings.trials}] waiting for {state[TrialState.RUNNING]} "
                        f"trial(s) running elsewhere")
                queue.append(target)
                idle_visits += 1
                if idle_visits >= len(queue):  # every study left is waiting
                    time.sleep(poll)
                    idle_visits = 0
                break
            idle_visits = 0
            waiting_said.discard(target.name)
            objective.last = None
            study.optimize(objective, n_trials=1, catch=(Exception,),
                           callbacks=[optuna.study.MaxTrialsCallback(settings.trials, states=FINISHED)])
            trial = next((t for t in study.get_trials(deepcopy=False) if t.number == objective.last), None)
            if trial is None or str(trial.user_attrs.get("reason", "")).startswith("surplus"):
                continue
            log(progress_line(study, trial, target, settings.trials))
            failures[target.name] = failures[target.name] + 1 if trial.state == TrialState.FAIL else 0
            if failures[target.name] >= MAX_FAILURES_IN_A_ROW:
                log(f"[{target.name}] {failures[target.name]} trials failed in a row; this worker stops searching it "
                    f"(see the reasons in trials.csv)")
                healthy = False
                break
    return healthy
