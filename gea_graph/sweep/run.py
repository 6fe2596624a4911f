r"""``gea-graph sweep``: check everything, open the storage, run workers, write the outputs, confirm on new seeds.

``DIR/sweep.json`` records how the sweep ran (the study, the storage with its credentials masked, the recipes and
their spaces, the caps, the command, the machine, and per invocation its start, end, load average and commit); it is
what ``--report`` and ``scripts/make_results.py`` read.
"""
from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.distributions import json_to_distribution

from gea_graph.bench.child import child_env, gea_graph_command, option_words
from gea_graph.bench.runner import _now, code_version, device_label, machine_info, run_bench
from gea_graph.io import ensure_folder, write_json
from gea_graph.sweep.report import CONFIRM_DIR, write_reports
from gea_graph.sweep.storage import (
    EMBEDDED_FILE,
    STORAGE_ENV,
    StorageError,
    absolute_sqlite,
    mask,
    open_storage,
    sqlite_file,
    storage_url,
)
from gea_graph.sweep.study import SETTINGS_ATTR, Settings, Target, check_settings, open_study, plan_targets
from gea_graph.sweep.worker import work
from gea_graph.train.recipe import load_recipe, resolve_recipe

SWEEP_FILE = "sweep.json"


@dataclass
class SweepOptions:
    r"""The options of ``gea-graph sweep`` (see :func:`run_sweep`)."""

    trials: int = 20
    max_time: float | None = None
    max_params: int | None = None
    jobs: int = 1
    threads: int | None = None
    storage: str | None = None
    study: str | None = None
    seed: int | None = None
    space: str | None = None
    confirm: Sequence[int] = ()
    overrides: Sequence[str] = ()
    pruner: str = "median"
    sampler: str = "tpe"
    heartbeat: float = 30.0
    command: str | None = None
    worker: bool = False


def read_sweep_json(out: Path) -> dict | None:
    path = out / SWEEP_FILE
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{path} is not a sweep record; move it away, or use another --out") from None
    if not isinstance(info, dict):
        raise ValueError(f"{path} is not a sweep record; move it away, or use another --out")  # noqa: TRY004
    return info


def run_sweep(specs: Sequence[str], out: os.PathLike, opts: SweepOptions, log: Callable[[str], None] = print) -> int:
    r"""Runs a sweep of the recipes :obj:`specs` into :obj:`out`; returns the exit code (0 done, 1 when a worker
    gave up on failing trials or a confirmation run failed). Every check (space, storage, study name, settings,
    confirmation seeds) passes before anything is written."""
    out = Path(out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial is ours (worker.progress_line)
    url, embedded = storage_url(opts.storage, out)
    if not embedded and opts.study is None:
        raise ValueError("--storage needs --study NAME: the name every worker of the sweep gives")
    study = opts.study or out.resolve().name
    targets = plan_targets(specs, study, opts.overrides, opts.space)
    for target in targets:
        clash = sorted(set(opts.confirm) & {target.recipe.trainer.seeds[0]})
        if clash:
            raise ValueError(f"--confirm {','.join(map(str, opts.confirm))}: seed {clash[0]} trained every trial of "
                             f"{target.name}; confirmation seeds must be new")
    previous = read_sweep_json(out)
    where = "embedded" if embedded else mask(url)
    if previous is not None and (previous.get("study"), previous.get("storage")) != (study, where):
        raise ValueError(f"{out} holds the sweep {previous.get('study')!r} in {previous.get('storage')}; give its "
                         f"--study and --storage, or another --out")
    settings = Settings([t.name for t in targets], opts.trials, opts.max_time, opts.max_params,
                        list(opts.overrides), opts.pruner, opts.sampler)
    if embedded and not (out / EMBEDDED_FILE).is_file():
        ensure_folder(out)  # a fresh embedded store holds no other study
    storage = open_storage(url, opts.heartbeat)
    check_settings(storage, study, targets, settings)
    ensure_folder(out)
    if opts.threads is not None:
        import torch

        torch.set_num_threads(opts.threads)
    if opts.worker:  # one of the parent's --jobs processes: the parent records the invocation and reports
        return 0 if work(storage, targets, settings, out, opts.seed, opts.overrides, log=log) else 1
    info = _record(previous, out, study, where, targets, specs, opts)
    session = info["invocations"][-1]
    try:
        if opts.jobs > 1:
            for target in targets:  # created once here, then joined by the workers
                open_study(storage, target, settings, opts.seed)
            healthy = _run_workers(specs, out, study, None if embedded else url, opts, targets, log)
        else:
            healthy = work(storage, targets, settings, out, opts.seed, opts.overrides, log=log)
        studies = [(t, optuna.load_study(study_name=t.study_name, storage=storage)) for t in targets]
        best = write_reports(studies, out, info, opts.overrides)
        if opts.confirm:
            healthy = _confirm(best, targets, out, opts, log) and healthy
            write_reports(studies, out, info, opts.overrides)
        log(f"wrote {out / 'trials.csv'}, {out / 'sweep.md'}"
            + "".join(f", {p}" for p in best.values()))
    finally:
        session["end"] = _now()
        session["load_average"].append(round(os.getloadavg()[0], 2))
        write_json(out / SWEEP_FILE, info)
    return 0 if healthy else 1


def _record(previous: dict | None, out: Path, study: str, where: str, targets: Sequence[Target],
            specs: Sequence[str], opts: SweepOptions) -> dict:
    info = json.loads(json.dumps(previous or {"invocations": []}))
    machine = machine_info()
    info.update({"study": study, "storage": where, "command": opts.command, "trials": opts.trials,
                 "max_time_min": opts.max_time, "max_params": opts.max_params, "seed": opts.seed,
                 "jobs": opts.jobs, "threads": opts.threads, "pruner": opts.pruner, "sampler": opts.sampler,
                 "overrides": list(opts.overrides), "space_file": opts.space, "machine": machine,
                 "recipes": {t.name: {"path": _recorded_path(t.path), "spec": spec, "study": t.study_name,
                                      "metric": t.metric,
                                      "higher_is_better": t.higher_is_better} for t, spec in zip(targets, specs)}})
    info["invocations"].append({"start": _now(), "end": None, "load_average": [round(os.getloadavg()[0], 2)],
                                "commit": machine["commit"], "code": code_version(), "device": device_label(machine),
                                "jobs": opts.jobs})
    write_json(out / SWEEP_FILE, info)
    return info


def _recorded_path(path: Path) -> str:
    # Relative to the working folder where the file lies under it, so that a committed sweep names no machine's
    # folders (--report finds it from there, else by the recipe's name).
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)


def _run_workers(specs: Sequence[str], out: Path, study: str, url: str | None, opts: SweepOptions,
                 targets: Sequence[Target], log: Callable[[str], None]) -> bool:
    r"""Starts ``opts.jobs`` worker processes (``gea-graph sweep ... --worker``; a shared storage's URL passes in
    the environment, never on a command line) and waits for them."""
    from gea_graph.train.data import load_datasets

    for target in targets:  # built once here, not by the workers at the same moment
        load_datasets(target.recipe.data)
    cmd = gea_graph_command("sweep", ",".join(specs), "--out", str(out), "--trials", str(opts.trials),
                            "--study", study, "--heartbeat", f"{opts.heartbeat:g}", "--pruner", opts.pruner,
                            "--sampler", opts.sampler, "--worker")
    cmd += option_words((("--max-time", opts.max_time), ("--max-params", opts.max_params), ("--seed", opts.seed),
                         ("--space", opts.space), ("--threads", opts.threads)), opts.overrides)
    env = child_env()
    env.pop(STORAGE_ENV, None)
    if url is not None:  # a shared storage; without it, each worker opens DIR's embedded store
        env[STORAGE_ENV] = url
    if opts.threads is not None:
        env.update(OMP_NUM_THREADS=str(opts.threads), MKL_NUM_THREADS=str(opts.threads))
    procs = [subprocess.Popen(cmd, env=env) for _ in range(opts.jobs)]
    try:
        codes = [p.wait() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait()
    for i, code in enumerate(codes):
        if code != 0:
            log(f"worker {i + 1} of {opts.jobs} ended with exit code {code}")
    return all(code == 0 for code in codes)


def _confirm(best: dict[str, Path], targets: Sequence[Target], out: Path, opts: SweepOptions,
             log: Callable[[str], None]) -> bool:
    r"""Trains each recipe's best configuration on the ``--confirm`` seeds with ``gea-graph bench`` in
    ``DIR/confirm`` (the sweep's cap; a bench folder like any other)."""
    missing = [t.name for t in targets if t.name not in best]
    if missing:
        log(f"--confirm: no complete trial of {', '.join(missing)} yet; not confirmed")
    paths = [str(best[t.name]) for t in targets if t.name in best]
    if not paths:
        return False
    command = (f"gea-graph bench --recipes {','.join(paths)} --seeds {','.join(map(str, opts.confirm))} "
               f"--out {out / CONFIRM_DIR} --jobs {opts.jobs}"
               + (f" --max-time {opts.max_time:g}" if opts.max_time is not None else "")
               + (f" --threads {opts.threads}" if opts.threads is not None else ""))
    runs = run_bench(paths, out / CONFIRM_DIR, seeds=list(opts.confirm), max_time=opts.max_time,
                     jobs=opts.jobs, threads=opts.threads, command=command, log=log)
    return not missing and all(r.status == "complete" for r in runs)


def report_sweep(out: os.PathLike, storage: str | None = None, log: Callable[[str], None] = print) -> None:
    r"""Redraws ``trials.csv``, ``best-<recipe>.yaml``, the plots and ``sweep.md`` of the sweep folder :obj:`out`
    from its storage (a shared storage with credentials: give ``--storage`` again, or ``$GEA_GRAPH_STORAGE``)."""
    out = Path(out)
    info = read_sweep_json(out)
    if info is None:
        raise ValueError(f"{out} holds no sweep ({SWEEP_FILE} is missing)")
    if info.get("storage") == "embedded":
        url, _ = storage_url(None, out)
    else:
        url = storage or os.environ.get(STORAGE_ENV) or info.get("storage")
        url = absolute_sqlite(url) if url is not None else None
        if url is None or "***" in url:
            raise StorageError(f"{out}'s storage has credentials ({info.get('storage')}); give --storage URL")
        recorded = info.get("storage")  # a sweep.json from before relative SQLite paths were made absolute
        if mask(url) not in (recorded, absolute_sqlite(recorded) if recorded else None):
            raise StorageError(f"--storage {mask(url)} is not this sweep's storage ({info.get('storage')})")
    stored = sqlite_file(url)
    if stored is not None and not stored.is_file():  # SQLite would create an empty file that holds no study
        raise StorageError(f"{out}'s storage {mask(url)} is missing: there is no file {stored}")
    storage_obj = open_storage(url, 30.0)
    studies = []
    for name, record in (info.get("recipes") or {}).items():
        try:
            study = optuna.load_study(study_name=record["study"], storage=storage_obj)
        except KeyError:
            raise ValueError(f"the storage {info.get('storage')} holds no study {record['study']!r}") from None
        stored = study.user_attrs.get(SETTINGS_ATTR) or {}
        space = {k: json_to_distribution(v) for k, v in (stored.get("space") or {}).items()}
        # the recipe file where the sweep read it, else by the name it was given (a copy of the folder elsewhere)
        path = Path(record["path"]) if Path(record["path"]).is_file() else resolve_recipe(record.get("spec", name))
        recipe = load_recipe(path, info.get("overrides") or [])
        studies.append((Target(path, recipe, space, record["study"], record["metric"],
                               bool(record["higher_is_better"])), study))
    write_reports(studies, out, info, info.get("overrides") or [])
    log(f"wrote {out / 'trials.csv'}, {out / 'sweep.md'}")
