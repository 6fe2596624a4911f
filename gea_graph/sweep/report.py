r"""A sweep's outputs, drawn from its storage (``gea-graph sweep DIR --report`` redraws them).

- ``trials.csv``: one row per trial of every recipe's study: its state (a trial is ``COMPLETE`` only once its run
  wrote ``result.json`` and the study recorded its value; a killed worker's trial is ``RUNNING`` until it is failed
  as stale), its best validation metric, epochs, seconds, parameter count, values, run folder and the reason of a
  pruned or failed trial;
- ``best-<recipe>.yaml``: the best complete trial as a complete recipe (named ``<recipe>-tuned``, no ``sweep:``
  block, ``trainer.max_time`` the sweep's cap), what ``--confirm`` trains on new seeds;
- ``sweep.md``: per recipe the ranking of its complete trials by validation metric, with Optuna's optimisation
  history and parameter importances (``history-<recipe>.png``, ``importance-<recipe>.png``), and the confirmation
  seeds' test metric where ``--confirm`` ran (a tuned comparison reports those, never the search's best value).
"""
from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from gea_graph.io import atomic_write, save_figure, write_text
from gea_graph.sweep.storage import EMBEDDED_FILE
from gea_graph.sweep.study import Target
from gea_graph.train.recipe import dump_recipe

TRIALS_FILE = "trials.csv"
REPORT_FILE = "sweep.md"
CONFIRM_DIR = "confirm"
COLUMNS = ("recipe", "study", "trial", "state", "metric", "val_metric", "test_metric", "epochs", "time_s",
           "train_time_s", "params", "seed", "host", "run_dir", "retry_of", "reason")


def trial_seconds(trial: FrozenTrial) -> float:
    if trial.datetime_start is None or trial.datetime_complete is None:
        return math.nan
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def trial_row(target: Target, trial: FrozenTrial, keys: Sequence[str]) -> dict[str, Any]:
    r"""The ``trials.csv`` row of one trial."""
    attrs = trial.user_attrs
    complete = trial.state == TrialState.COMPLETE
    row = {"recipe": target.name, "study": target.study_name, "trial": trial.number, "state": trial.state.name,
           "metric": target.metric, "val_metric": trial.value if complete else "",
           "test_metric": attrs.get("test", "") if complete else "",
           "epochs": attrs.get("epochs", len(trial.intermediate_values)) if complete
           else len(trial.intermediate_values),
           "time_s": "" if math.isnan(trial_seconds(trial)) else round(trial_seconds(trial), 1),
           "train_time_s": attrs.get("train_time_s", "") if complete else "",
           "params": attrs.get("params", ""), "seed": attrs.get("seed", ""), "host": attrs.get("host", ""),
           "run_dir": attrs.get("run_dir", ""), "retry_of": trial.system_attrs.get("failed_trial", ""),
           "reason": attrs.get("reason", "") if not complete else ""}
    row.update({f"param:{k}": trial.params.get(k, "") for k in keys})
    return row


def ranked(study: optuna.Study, target: Target) -> list[FrozenTrial]:
    r"""The complete trials, best first."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None
            and math.isfinite(t.value)]
    return sorted(done, key=lambda t: (-t.value if target.higher_is_better else t.value, t.number))


def write_trials(studies: Sequence[tuple[Target, optuna.Study]], out: Path) -> None:
    keys = list(dict.fromkeys(k for target, _ in studies for k in target.space))
    rows = [trial_row(target, trial, keys) for target, study in studies
            for trial in study.get_trials(deepcopy=False)]
    with atomic_write(out / TRIALS_FILE, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, *(f"param:{k}" for k in keys)])
        writer.writeheader()
        writer.writerows(rows)


def write_best(target: Target, best: FrozenTrial, out: Path, max_time: float | None,
               overrides: Sequence[str]) -> Path:
    r"""``best-<recipe>.yaml``: the recipe with the best trial's values, complete and self-contained."""
    from gea_graph.sweep.space import trial_recipe

    recipe, _ = trial_recipe(target.path, best.params, overrides)
    recipe.name = f"{target.name}-tuned"
    recipe.sweep = {}
    if max_time is not None:
        recipe.trainer.max_time = max_time
    values = ", ".join(f"{k}={v}" for k, v in best.params.items())
    recipe.description = (f"{target.name} tuned by gea-graph sweep: trial {best.number} of study "
                          f"{target.study_name}, the best validation {target.metric} ({best.value:.6g}) of its "
                          f"complete trials; {values}. {recipe.description}").strip()
    path = out / f"best-{target.name}.yaml"
    dump_recipe(recipe, path)
    return path


def plot(study: optuna.Study, target: Target, out: Path) -> dict[str, str]:
    r"""Optuna's matplotlib optimisation history and parameter importances as PNG (what could be drawn:
    importances need two complete trials and a parameter that varies; nothing without a complete trial)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    drawn: dict[str, str] = {}
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return drawn  # Optuna would log that it has no complete trial; the report says so itself
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna marks its matplotlib backend experimental
        for kind, draw in (("history", ovm.plot_optimization_history), ("importance", ovm.plot_param_importances)):
            name = f"{kind}-{target.name}.png"
            try:
                ax = draw(study)
            except (ValueError, RuntimeError, ZeroDivisionError) as err:
                drawn[kind] = f"not drawn: {' '.join(str(err).split())}"
                continue
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            fig.set_size_inches(7, 4)
            fig.tight_layout()
            save_figure(fig, out / name, dpi=100)
            plt.close(fig)
            drawn[kind] = name
    return drawn


def confirm_rows(out: Path, target: Target) -> list[dict]:
    r"""The complete confirmation runs of :obj:`target`'s tuned recipe (``DIR/confirm/<recipe>-tuned/seed*``)."""
    from gea_graph.train import read_result

    folder = out / CONFIRM_DIR / f"{target.name}-tuned"
    if not folder.is_dir():
        return []
    results = [read_result(p) for p in sorted(folder.glob("seed*"))]
    return [r for r in results if r is not None]


def markdown(studies: Sequence[tuple[Target, optuna.Study]], out: Path, info: dict, plots: dict[str, dict],
             top: int = 10) -> str:
    r"""``sweep.md``: the settings, then per recipe the state counts, the ranking and the plots, then the tuned
    comparison on the confirmation seeds."""
    from gea_graph.bench.runner import mean_std

    cap = info.get("max_time_min")
    lines = ["# Hyperparameter sweep", "",
             f"Command: `{info.get('command')}`", "",
             f"Study `{info.get('study')}` in {storage_words(info.get('storage'))}; {info.get('trials')} finished "
             f"trial{'s' if info.get('trials') != 1 else ''} per recipe "
             f"(complete or pruned), {'a cap of ' + format(cap, 'g') + ' min' if cap else 'no time cap'} per trial, "
             + (f"at most {info['max_params']:,} parameters" if info.get("max_params") else "no parameter cap")
             + f", sampler {info.get('sampler')}, pruner {info.get('pruner')}"
             + (f", seed {info['seed']}" if info.get("seed") is not None else "") + ".", ""]
    machine = info.get("machine") or {}
    if machine:
        lines += [(f"Machine: {machine.get('cpu')}, {machine.get('cores')} cores; commit {machine.get('commit')}; "
                   f"torch {machine.get('torch')}."), ""]
    lines += [("The ranking is by the validation metric of each trial's best epoch; the test metric of the search "
               "is not reported (a tuned comparison reads the confirmation seeds below)."), ""]
    for target, study in studies:
        state = {s: 0 for s in TrialState}
        for trial in study.get_trials(deepcopy=False):
            state[trial.state] += 1
        direction = "higher is better" if target.higher_is_better else "lower is better"
        lines += [f"## {target.name} (validation {target.metric}, {direction})", "",
                  "Trials: " + ", ".join(f"{n} {s.name.lower()}" for s, n in state.items() if n) + ".", ""]
        best = ranked(study, target)
        if best:
            keys = list(target.space)
            lines += ["| rank | trial | val | epochs | seconds | params | " + " | ".join(keys) + " |",
                      "|---" * (6 + len(keys)) + "|"]
            for rank, trial in enumerate(best[:top], 1):
                lines.append(f"| {rank} | {trial.number} | {trial.value:.4f} | {trial.user_attrs.get('epochs', '')} "
                             f"| {trial_seconds(trial):.0f} | {trial.user_attrs.get('params', 0):,} | "
                             + " | ".join(_fmt(trial.params.get(k)) for k in keys) + " |")
            lines += ["", f"Best: trial {best[0].number}, written as `best-{target.name}.yaml`.", ""]
        else:
            lines += ["No trial completed: nothing to rank or plot.", ""]
        for kind, what in plots.get(target.name, {}).items():
            title = "Optimisation history" if kind == "history" else "Parameter importances"
            lines += [f"![{title} of {target.name}]({what})" if what.endswith(".png") else f"{title}: {what}.", ""]
    confirmed = [(target, confirm_rows(out, target)) for target, _ in studies]
    if any(rows for _, rows in confirmed):
        lines += ["## Tuned comparison (confirmation seeds)", "",
                  ("Each recipe's best configuration retrained on new seeds by `gea-graph bench` "
                   f"(`{CONFIRM_DIR}/`); test metric at the best validation epoch, mean ± population std."), "",
                  "| recipe | params | seeds | epochs | val | test |", "|---|---|---|---|---|---|"]
        for target, rows in confirmed:
            if not rows:
                continue
            val, test = mean_std([r["val"] for r in rows]), mean_std([r["test"] for r in rows])
            epochs = "/".join(str(e) for e in sorted({r["epochs"] for r in rows}))
            lines.append(f"| {target.name}-tuned | {rows[0]['params']:,} | {len(rows)} | {epochs} | "
                         f"{val[0]:.4f} ± {val[1]:.4f} | {test[0]:.4f} ± {test[1]:.4f} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def storage_words(storage: str | None) -> str:
    r"""Where the study lives, for the report: ``sweep.json``'s ``storage`` is ``"embedded"`` or a masked URL."""
    if storage == "embedded":
        return f"the sweep's own SQLite file (`{EMBEDDED_FILE}`)"
    return f"the storage `{storage}`"


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_reports(studies: Sequence[tuple[Target, optuna.Study]], out: Path, info: dict,
                  overrides: Sequence[str]) -> dict[str, Path]:
    r"""Writes ``trials.csv``, ``best-<recipe>.yaml`` (recipes with a complete trial), the plots and
    ``sweep.md``; returns the best recipe files by recipe name."""
    write_trials(studies, out)
    best_files: dict[str, Path] = {}
    plots: dict[str, dict] = {}
    for target, study in studies:
        best = ranked(study, target)
        if best:
            best_files[target.name] = write_best(target, best[0], out, info.get("max_time_min"), overrides)
        plots[target.name] = plot(study, target, out)
    write_text(out / REPORT_FILE, markdown(studies, out, info, plots))
    return best_files
