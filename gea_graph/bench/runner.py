r"""The benchmark runner behind ``gea-graph bench``: every recipe x seed, resumable, then the result files.

Each run trains in its own process (``python -m gea_graph train ... --resume``) into ``DIR/<recipe>/seed<seed>/``, so
peak memory is per run, a crash does not stop the bench, and an interrupted bench continues where it stopped: a run
whose ``result.json`` exists is skipped, a run with only ``checkpoints/last.ckpt`` resumes from it. ``jobs`` runs
train at the same time (each with ``threads`` torch threads; their output goes to ``<run dir>/train.log`` when
``jobs > 1``, after :func:`prepare_data` has built their datasets once); runs are independent processes, so a
parallel bench gives the results of a sequential one.

Outputs in ``DIR``:

- ``bench.json``: how the bench ran (:func:`bench_info`: the command, jobs, threads, time cap, the machine's CPU
  and cores, the library versions and commit, and per invocation its start, end, load average and commit), read by
  ``scripts/make_results.py``;
- ``results.csv``: one row per run (:data:`CSV_COLUMNS`, then ``test_<key>`` for each further value of a metric
  that computes several, e.g. PCQM-Contact's ``test_hits@1`` ... ``test_mrr_filtered``); ``train_metric`` is the
  selected checkpoint's metric on the training split (``trainer.eval_train``), empty for a run without it;
- ``results.md``: per dataset, mean ± std (population, as GraphGPS) over seeds per recipe and its parameter count,
  with the published number (and the published further values) beside it where the recipe copies a paper; a train
  column when some run of the bench measured it (``–`` for the runs that did not);
- ``curves.png``: validation (solid) and test (dashed) metric against epoch, one panel per recipe, one line per seed.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import json
import math
import os
import signal
import subprocess
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gea_graph import checks
from gea_graph.bench.child import child_env, gea_graph_command
from gea_graph.data import DATASETS
from gea_graph.io import (
    append_to,
    atomic_write,
    ensure_folder,
    save_figure,
    write_json,
    write_text,
)
from gea_graph.train.logs import METRICS_FILE, read_metrics
from gea_graph.train.recipe import Recipe, load_recipe, resolve_recipe
from gea_graph.train.run import PAUSED_EXIT_CODE, epochs_text
from gea_graph.train.run_dir import check_run_dir, read_result, recipe_digest

BENCH_FILE = "bench.json"
#: The files a bench writes into its folder beside :data:`BENCH_FILE` (:func:`write_reports`).
REPORT_FILES = ("results.csv", "results.md", "curves.png")
LOG_FILE = "train.log"
CSV_COLUMNS = ("recipe", "dataset", "seed", "params", "epochs", "best_val_epoch", "val_metric", "test_metric",
               "train_metric", "train_time_s", "peak_memory_mb", "metric", "max_time_min", "threads", "jobs", "code")


#: What a run's own record in ``bench.json`` holds, and what its siblings (the runs of one recipe) must share to be
#: averaged: the time cap in minutes (``--max-time``, else the recipe's ``trainer.max_time``; ``None``: epochs
#: only), torch threads, runs at a time, and the digest of the resolved recipe (:func:`recipe_digest`).
SETTINGS = ("max_time_min", "threads", "jobs", "recipe")


class BenchError(ValueError):
    r"""A bench that would count dishonestly (runs of one recipe under different settings, two recipes sharing a
    name); the message names the runs and the difference."""


@dataclass
class BenchRun:
    r"""One recipe x seed of a benchmark. ``status`` after :func:`run_bench`: ``complete`` (its ``result.json``
    exists), ``paused`` (stopped cleanly by ``stop_after``; it resumes from its last epoch), ``failed`` or
    ``pending`` (not started in this invocation). ``overrides``: every ``KEY=VALUE`` override it trains with."""

    recipe: Recipe
    path: Path
    seed: int
    run_dir: Path
    status: str = "pending"
    overrides: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        r"""``<recipe>/seed<seed>``: the run's folder in the bench and its key in ``bench.json``'s ``runs``."""
        return f"{self.recipe.name}/seed{self.seed}"

    @property
    def result(self) -> dict | None:
        return read_result(self.run_dir)

    @property
    def started(self) -> bool:
        r"""Whether the run has trained (a result or a checkpoint to resume from)."""
        return self.result is not None or (self.run_dir / "checkpoints" / "last.ckpt").is_file()


def plan(recipes: Sequence[str], seeds: Sequence[int] | None, out_dir: Path,
         overrides: Sequence[str] = (), log=print,
         recipe_overrides: Mapping[str, Sequence[str]] | None = None) -> list[BenchRun]:
    r"""The runs of a benchmark (the recipe's own seeds unless ``seeds`` is given). A seed or recipe given twice
    runs once (``log`` says so); two different recipes of one name (whose runs would share a folder) are refused.
    ``recipe_overrides``: overrides of single recipes (by file name without ``.yaml``, e.g. a suite's smaller data
    for its deepest trees), applied before ``overrides``, the overrides of every recipe."""
    if seeds is not None:
        seeds = checks.unique([checks.seed(s, "--seeds") for s in seeds], "--seeds", log)
    paths = checks.unique([resolve_recipe(spec) for spec in recipes], "--recipes", log, key=lambda p: p.resolve())
    runs: list[BenchRun] = []
    named: dict[str, Path] = {}
    for path in paths:
        own_overrides = (*(recipe_overrides or {}).get(path.stem, ()), *overrides)
        recipe = load_recipe(path, own_overrides)
        if recipe.name in named:
            raise BenchError(f"the recipes {named[recipe.name]} and {path} are both named {recipe.name!r}: their runs "
                             f"would share {out_dir / recipe.name}; give one another name (its name: key)")
        named[recipe.name] = path
        own = checks.unique(recipe.trainer.seeds, f"{recipe.name}'s trainer.seeds", log) if seeds is None else seeds
        for seed in own:
            runs.append(BenchRun(recipe, path, seed, out_dir / recipe.name / f"seed{seed}", overrides=own_overrides))
            check_run_dir(runs[-1].run_dir, recipe)  # a run of other overrides is neither skipped nor resumed
    return runs


def run_settings(run: BenchRun, max_time: float | None, threads: int | None, jobs: int) -> dict[str, object]:
    r"""The settings of one run in this invocation (see :data:`SETTINGS`)."""
    budget = max_time if max_time is not None else run.recipe.trainer.max_time
    return {"max_time_min": budget, "threads": threads, "jobs": jobs, "recipe": recipe_digest(run.recipe.to_dict())}


def _describe(key: str, value: object) -> str:
    if key == "max_time_min":
        return f"a cap of {value:g} min" if value is not None else "no time cap"
    if key == "threads":
        return f"{value} torch threads" if value is not None else "torch's default threads"
    if key == "jobs":
        return f"{value} run{'s' if value != 1 else ''} at a time"
    return f"recipe {value}"


def check_siblings(runs: Sequence[BenchRun], previous: dict, settings: dict[str, dict], given: dict,
                   out: Path) -> None:
    r"""Refuses (:class:`BenchError`) a bench whose runs would be averaged with runs of the same recipe in ``out``
    trained under other settings (:data:`SETTINGS`; ``settings``: each planned run's): such runs are never counted
    together. A run in a folder whose ``bench.json`` predates per-run records is taken to have the folder's last
    recorded ``--max-time``, threads and jobs, compared with this invocation's (``given``)."""
    records = previous.get("runs")
    planned = {run.recipe.name: run for run in runs}
    for name, run in planned.items():
        folder = out / name
        if not folder.is_dir() or folder.is_symlink():
            continue
        for seed_dir in sorted(p.name for p in folder.iterdir() if p.name.startswith("seed")):
            sibling = BenchRun(run.recipe, run.path, -1, folder / seed_dir)
            if not sibling.started:
                continue
            if records is not None and f"{name}/{seed_dir}" in records:
                had, wanted, note = records[f"{name}/{seed_dir}"], settings[run.key], ""
            elif records is None and previous.get("invocations"):
                had = {k: previous.get(k) for k in ("max_time_min", "threads", "jobs")}
                wanted, note = given, " (its bench.json records the settings of the last invocation only)"
            else:
                continue
            for field in SETTINGS:
                if field in had and field in wanted and had[field] != wanted[field]:
                    raise BenchError(f"{folder / seed_dir} was trained with {_describe(field, had[field])}{note}, "
                                     f"this bench gives {_describe(field, wanted[field])}: runs of one recipe under "
                                     f"different settings are never averaged; use the same settings, or another "
                                     f"--out")


def train_command(run: BenchRun, overrides: Sequence[str], max_time: float | None,
                  trainer_args: Sequence[str], stop_after: float | None = None) -> list[str]:
    r"""The ``gea-graph train`` command line of one run."""
    cmd = gea_graph_command("train", str(run.path), *overrides, "--out", str(run.run_dir), "--seed", str(run.seed),
                            "--resume", "--no-progress", *trainer_args)
    if max_time is not None:
        cmd += ["--max-time", str(max_time)]
    if stop_after is not None:
        cmd += ["--stop-after", f"{stop_after:.4f}"]
    return cmd


def machine_info() -> dict[str, object]:
    r"""The CPU model, its cores, the platform and the versions of Python, torch and PyG (for the results page)."""
    import platform

    import torch
    import torch_geometric

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__, "commit": _git_commit()}


def device_label(machine: dict) -> str:
    r"""What a run computed on, from :func:`machine_info`: the GPU, else the CPU model and its cores. A capped run's
    epochs depend on it, so each invocation and each run record it."""
    return machine.get("gpu") or f"{machine.get('cpu', 'unknown CPU')}, {machine.get('cores', '?')} cores"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                             cwd=Path(__file__).resolve().parent)
    except OSError:
        return None
    return out.stdout.strip() or None


def code_version() -> str:
    r"""A digest of the code a run computes with: every source file of this package and the versions of torch,
    PyG and Lightning (a change to any of them may change results; a change to documentation does not)."""
    import lightning
    import torch
    import torch_geometric

    digest = hashlib.sha1()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"{torch.__version__} {torch_geometric.__version__} {lightning.__version__}".encode())
    return digest.hexdigest()[:10]


def read_bench_json(out: Path) -> dict:
    r"""``bench.json`` of ``out`` (a fresh record when there is none)."""
    path = out / BENCH_FILE
    if not path.is_file():
        return {"invocations": [], "runs": {}}
    try:
        info = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise BenchError(f"{path} is not a bench record ({err}); move it away, or use another --out") from None
    if not isinstance(info, dict) or not isinstance(info.get("invocations", []), list):
        raise BenchError(f"{path} is not a bench record; move it away, or use another --out")
    return info


def bench_info(previous: dict, command: str | None, jobs: int, threads: int | None, max_time: float | None,
               overrides: Sequence[str]) -> dict:
    r"""``bench.json`` updated for a new invocation (earlier invocations and run records of a resumed bench are
    kept; the top-level settings are the last invocation's, each run's own are in ``runs``)."""
    info = json.loads(json.dumps(previous))
    invocations = info.setdefault("invocations", [])
    if invocations and "device" not in invocations[-1] and previous.get("machine"):
        # a bench from before invocations recorded their device: the top-level machine is the last invocation's,
        # about to be replaced by this one's
        invocations[-1]["device"] = device_label(previous["machine"])
    info.update({"command": command, "jobs": jobs, "threads": threads, "max_time_min": max_time,
                 "overrides": list(overrides), "machine": machine_info()})
    return info


def record_run(info: dict, run: BenchRun, settings: dict, overrides: Sequence[str], code: str,
               commit: str | None, device: str | None = None) -> None:
    r"""Records in ``info["runs"]`` the settings a run trains with, and each code version, commit and device it
    trained on (a run resumed on other code lists both, and is reported apart from its siblings)."""
    record = info.setdefault("runs", {}).setdefault(run.key, {})
    record.update({**settings, "overrides": list(overrides)})
    for field, value in (("code", code), ("commits", commit), ("devices", device)):
        if value is not None and value not in record.setdefault(field, []):
            record[field].append(value)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def prepare_data(runs: Sequence[BenchRun], log=print) -> None:
    r"""Builds (or finds cached) each distinct dataset of ``runs`` once, in this process, before parallel runs start:
    runs started together never build the same cache twice at once, and no run's time cap is spent on another's
    data preparation. A dataset that fails to build is left to its runs, which report the error."""
    from gea_graph.train.data import load_datasets

    done: set[str] = set()
    for run in runs:
        key = json.dumps(dataclasses.asdict(run.recipe.data), sort_keys=True, default=str)
        if key in done:
            continue
        done.add(key)
        log(f"preparing {run.recipe.data.label} (pe: {run.recipe.data.pe or 'none'})")
        try:
            load_datasets(run.recipe.data)
        except Exception as err:  # noqa: BLE001 -- the runs of this dataset fail and report it
            log(f"preparing {run.recipe.data.label} failed ({type(err).__name__}: {err}); its runs will report it")


def run_bench(recipes: Sequence[str], out_dir: os.PathLike, seeds: Sequence[int] | None = None,
              max_time: float | None = None, overrides: Sequence[str] = (),
              trainer_args: Sequence[str] = (), jobs: int = 1, threads: int | None = None,
              command: str | None = None, log=print, poll: float = 0.5,
              stop_after: float | None = None,
              recipe_overrides: Mapping[str, Sequence[str]] | None = None) -> list[BenchRun]:
    r"""Runs (or skips, when complete) every recipe x seed, ``jobs`` at a time, then writes the result files.
    Returns the runs with their ``status``; those that failed or are not finished have no ``result``.

    With ``stop_after`` (minutes) the invocation is a chunk of the bench: runs start only before that time (the
    first ``jobs`` always start), and each running run stops cleanly at its first epoch end after it (its
    checkpoints written; ``gea-graph train --stop-after``). Running the same bench again, in the same folder or a
    copy of it on another machine, resumes every run exactly where it stopped; chunk after chunk, the bench reaches
    the results of an uninterrupted one (for runs bounded by epochs; a run's ``max_time`` counts its training time,
    which a chunk boundary does not change, but that time depends on the machine anyway).

    Args:
        recipes: Recipe names or paths.
        out_dir: Output directory.
        seeds: Seeds of every recipe (``None``: each recipe's ``trainer.seeds``).
        max_time: Wall-clock cap of each run in minutes.
        overrides: ``KEY=VALUE`` overrides of every recipe.
        recipe_overrides: Overrides of single recipes, by name, applied before ``overrides`` (see :func:`plan`).
        trainer_args: Extra ``gea-graph train`` flags (placement).
        jobs: Runs training at the same time (each a process).
        threads: Torch threads of each run (``--threads`` and ``OMP_NUM_THREADS``; ``None``: torch's default).
        command: The command line that started the bench (recorded in ``bench.json``).
        log: Progress printer.
        poll: Seconds between checks of the running processes.
        stop_after: Stop this invocation cleanly after so many minutes (see above).
    """
    jobs = checks.positive_int(jobs, "jobs")
    threads = None if threads is None else checks.positive_int(threads, "threads")
    max_time = None if max_time is None else checks.minutes(max_time, "max_time")
    out = Path(out_dir)
    runs = plan(recipes, seeds, out, overrides, log=log, recipe_overrides=recipe_overrides)
    previous = read_bench_json(out)
    settings = {run.key: run_settings(run, max_time, threads, jobs) for run in runs}
    check_siblings(runs, previous, settings, {"max_time_min": max_time, "threads": threads, "jobs": jobs}, out)
    ensure_folder(out)  # nothing is written before the bench is known to count honestly
    info = bench_info(previous, command, jobs, threads, max_time, overrides)
    code = code_version()
    session = {"start": _now(), "end": None, "load_average": [], "commit": info["machine"]["commit"],
               "stop_after_min": stop_after, "code": code, "device": device_label(info["machine"])}
    info["invocations"].append(session)
    write_json(out / BENCH_FILE, info)
    extra = list(trainer_args) + (["--threads", str(threads)] if threads is not None else [])
    env = child_env()  # the runs import this process's gea_graph: the code the digest above names
    if threads is not None:  # also the OpenMP / MKL pools that torch.set_num_threads does not reach
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    queue: deque[tuple[str, BenchRun]] = deque()
    for i, run in enumerate(runs, 1):
        tag = f"[{i}/{len(runs)}] {run.recipe.name} seed {run.seed}"
        if run.result is not None:
            run.status = "complete"
            log(f"{tag}: complete, skipped")
        else:
            queue.append((tag, run))
    deadline = time.monotonic() + stop_after * 60 if stop_after is not None else math.inf
    started = 0
    if jobs > 1:
        prepare_data([run for _, run in queue], log)
    active: list[tuple[str, BenchRun, subprocess.Popen, object]] = []
    last_sample = -math.inf
    with _sigterm_as_exit(), contextlib.ExitStack() as stack:
        stack.callback(_stop, active, session, info, out)
        while queue or active:
            while queue and len(active) < jobs and (time.monotonic() < deadline or started < jobs):
                tag, run = queue.popleft()
                ensure_folder(run.run_dir, within=out)
                sink = append_to(run.run_dir / LOG_FILE) if jobs > 1 else None
                where = f" (log: {run.run_dir / LOG_FILE})" if sink is not None else ""
                log(f"{tag}: training in {run.run_dir}{where}")
                left = max(0.0, (deadline - time.monotonic()) / 60) if stop_after is not None else None
                proc = subprocess.Popen(train_command(run, run.overrides, max_time, extra, left), env=env,
                                        stdout=sink, stderr=subprocess.STDOUT if sink is not None else None)
                active.append((tag, run, proc, sink))
                started += 1
                record_run(info, run, settings[run.key], run.overrides, code, session["commit"], session["device"])
                write_json(out / BENCH_FILE, info)
            if not active and queue:  # the chunk's time is up: the rest waits for the next invocation
                break
            if time.monotonic() - last_sample >= 60:
                session["load_average"].append(round(os.getloadavg()[0], 2))
                last_sample = time.monotonic()
            time.sleep(poll)
            for item in [a for a in active if a[2].poll() is not None]:
                active.remove(item)
                tag, run, proc, sink = item
                if sink is not None:
                    sink.close()
                if proc.returncode == PAUSED_EXIT_CODE and run.result is None:
                    run.status = "paused"
                    log(f"{tag}: paused at an epoch end (it resumes there next time)")
                elif proc.returncode != 0 or run.result is None:
                    run.status = "failed"
                    see = f"see {run.run_dir / LOG_FILE}" if sink is not None else "see the output above"
                    log(f"{tag}: FAILED (exit code {proc.returncode}); {see}")
                else:
                    run.status = "complete"
                    log(f"{tag}: done, {epochs_text(run.result)}")
    write_reports(runs, out, info)
    return runs


def _stop(active: list, session: dict, info: dict, out: Path) -> None:
    r"""Ends an invocation, finished or interrupted: stops the runs still training (they resume from ``last.ckpt``
    next time) and records the invocation's end and last load average in ``bench.json``."""
    for _, _, proc, sink in active:
        proc.terminate()
        proc.wait()
        if sink is not None:
            sink.close()
    session["end"] = _now()
    session["load_average"].append(round(os.getloadavg()[0], 2))
    write_json(out / BENCH_FILE, info)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    r"""Turns SIGTERM (``kill``, a job scheduler's stop) into :class:`SystemExit` while the bench runs, so that its
    runs are stopped and ``bench.json`` records the invocation's end, as after Ctrl-C; the default handler would
    kill the bench without either. Only the main thread can set a handler; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- reports --------------------------------------------------------------------------------------------------------


def more_keys(results: Sequence[dict]) -> list[str]:
    r"""The further metric values (``test_more`` of ``result.json``) that the results hold, in first-seen order."""
    return list(dict.fromkeys(key for res in results for key in res.get("test_more", {})))


def run_record(run: BenchRun, info: dict | None) -> dict | None:
    r"""The run's own record in ``bench.json`` (``None`` for a bench made before runs had one)."""
    return ((info or {}).get("runs") or {}).get(run.key)


def variant(record: dict | None) -> tuple:
    r"""What runs of one recipe must share to be averaged: :data:`SETTINGS` and the code versions."""
    if record is None:
        return ()
    return (*(record.get(k) for k in SETTINGS), tuple(record.get("code", [])))


def variant_labels(records: Sequence[dict | None]) -> list[str]:
    r"""A label per variant of one recipe (``""`` when it has one): what tells the variants apart, e.g.
    ``[cap 5 min]`` or ``[code 1a2b3c4d5e]``."""
    variants = list(dict.fromkeys(variant(r) for r in records))
    if len(variants) < 2:
        return ["" for _ in records]
    names = ("cap", "threads", "jobs", "recipe", "code")
    differ = [i for i in range(len(names)) if len({(v[i] if v else None) for v in variants}) > 1]

    def show(i: int, record: dict | None) -> str:
        value = variant(record)[i] if record is not None else None
        if record is None:
            return f"{names[i]} not recorded"
        if names[i] == "cap":
            return f"cap {value:g} min" if value is not None else "no cap"
        if names[i] == "code":
            return "code " + "+".join(value)
        return f"{names[i]} {value}"

    return [" [" + ", ".join(show(i, r) for i in differ) + "]" for r in records]


def result_rows(runs: Sequence[BenchRun], info: dict | None = None) -> list[dict[str, object]]:
    r"""The ``results.csv`` rows of the complete runs, with each run's own cap, threads, jobs and code."""
    rows = []
    for run in runs:
        res = run.result
        if res is None:
            continue
        record = run_record(run, info) or {}
        rows.append({"recipe": res["recipe"], "dataset": res["dataset"], "seed": res["seed"],
                     "params": res["params"], "epochs": res["epochs"], "best_val_epoch": res["best_epoch"],
                     "val_metric": res["val"], "test_metric": res["test"], "train_metric": res.get("train", ""),
                     "train_time_s": res["train_time_s"],
                     "peak_memory_mb": res["peak_memory_mb"], "metric": res["metric"],
                     "max_time_min": record.get("max_time_min", ""), "threads": record.get("threads", ""),
                     "jobs": record.get("jobs", ""), "code": "+".join(record.get("code", [])),
                     **{f"test_{k}": v for k, v in res.get("test_more", {}).items()}})
    return rows


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    r"""Mean and population standard deviation (``np.std``, ddof 0, as GraphGPS's aggregation)."""
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _fmt(values: Sequence[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.4f} ± {std:.4f}"


def _fmt_train(results: Sequence[dict]) -> str:
    r"""The train metric of a row (``–`` unless every run of it measured it: ``trainer.eval_train``)."""
    values = [res.get("train") for res in results]
    return _fmt(values) if None not in values else "–"


def _fmt_more(results: Sequence[dict], key: str) -> str:
    values = [res.get("test_more", {}).get(key) for res in results]
    return _fmt(values) if None not in values else "–"


def _published(paper) -> str:
    if paper is None:
        return "–"
    text = f"{paper.value:.4f}" + (f" ± {paper.std:.4f}" if paper.std is not None else "")
    for key, (mean, std) in paper.extra.items():
        text += f"; {key} {mean:.4f} ± {std:.4f}"
    return text + f" ({paper.metric}; {paper.source})"


def groups(runs: Sequence[BenchRun], info: dict | None = None) -> dict[str, list[BenchRun]]:
    r"""The complete runs by row: one row per recipe, or per recipe and variant where runs of one recipe differ in
    their settings or code (:func:`variant`; they are never averaged together), labelled by the difference."""
    by_recipe: dict[str, list[BenchRun]] = defaultdict(list)
    for run in runs:
        if run.result is not None:
            by_recipe[run.recipe.name].append(run)
    rows: dict[str, list[BenchRun]] = {}
    for name, group in by_recipe.items():
        records = [run_record(run, info) for run in group]
        for run, label in zip(group, variant_labels(records)):
            rows.setdefault(name + label, []).append(run)
    return rows


def markdown(runs: Sequence[BenchRun], info: dict | None = None) -> str:
    r"""``results.md``: a table per dataset, one line per recipe (mean ± std over its complete seeds; runs of one
    recipe under different settings or code in rows of their own, see :func:`groups`)."""
    by_dataset: dict[str, dict[str, list[BenchRun]]] = defaultdict(dict)
    for label, group in groups(runs, info).items():
        by_dataset[group[0].result["dataset"]][label] = group
    train = any("train" in run.result for group in groups(runs, info).values() for run in group)
    lines = ["# Benchmark results", "",
             "Test metric read at the best-validation epoch of each seed; mean ± population std over seeds.", ""]
    if train:
        lines += [("Train: the metric of that epoch's checkpoint on the training split, in eval mode "
                   "(`trainer.eval_train`; – where a run did not measure it)."), ""]
    for dataset, recipes in by_dataset.items():
        first = next(iter(recipes.values()))[0].result
        direction = "higher is better" if first["higher_is_better"] else "lower is better"
        more = more_keys([r.result for group in recipes.values() for r in group])
        lines += [f"## {dataset} ({first['metric']}, {direction})", "",
                  "| recipe | params | seeds | epochs | " + ("train | " if train else "") + "val | test | "
                  + "".join(f"test {k} | " for k in more) + "paper |", "|---" * (7 + train + len(more)) + "|"]
        cut = False
        for name, group in recipes.items():
            res = [r.result for r in group]
            epochs = "/".join(dict.fromkeys(epochs_cell(r) for r in res))
            cut = cut or any(r.get("cut_by_time_cap") for r in res)
            extra = "".join(f"{_fmt_more(res, key)} | " for key in more)
            lines.append(f"| {name} | {res[0]['params']:,} | {len(res)} | {epochs} | "
                         + (f"{_fmt_train(res)} | " if train else "")
                         + f"{_fmt([r['val'] for r in res])} | {_fmt([r['test'] for r in res])} | {extra}"
                         f"{_published(group[0].recipe.paper)} |")
        if cut:
            lines += ["", ("\\* cut by the time cap: the run ended after that many of its planned epochs "
                           "(`result.json`: `cut_by_time_cap`).")]
        known = DATASETS.get(dataset)
        flagged = [name for name, group in recipes.items()
                   if known is not None and known.caveat_for(group[0].recipe.data.options) is not None]
        if flagged:  # e.g. ZINC read with OGB features: only those rows are not comparable with the paper
            lines += ["", f"Note ({', '.join(flagged)}): {known.caveat}"]
        split = sorted({name for name, group in recipes.items() if name != group[0].recipe.name})
        if split:
            note = "Runs of one recipe under different settings or code are not averaged: each has a row of its own"
            lines += ["", f"{note} ({', '.join(split)})."]
        lines.append("")
    if not by_dataset:
        lines.append("No complete runs.")
    return "\n".join(lines) + "\n"


def epochs_cell(result: dict) -> str:
    r"""An epochs cell of a results table: ``8``, or ``2 of 8\*`` for a run its time cap ended early."""
    if result.get("cut_by_time_cap"):
        return f"{result['epochs']} of {result.get('epochs_planned', '?')}\\*"
    return str(result["epochs"])


def plot_curves(runs: Sequence[BenchRun], path: Path) -> None:
    r"""``curves.png``: validation (solid) and test (dashed) metric per epoch, a panel per recipe."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[BenchRun]] = defaultdict(list)
    for run in runs:
        if (run.run_dir / METRICS_FILE).is_file():
            groups[run.recipe.name].append(run)
    n = max(len(groups), 1)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, (name, group) in zip(axes.flat, groups.items()):
        for run in group:
            hist = read_metrics(run.run_dir / METRICS_FILE)
            epochs = [r["epoch"] + 1 for r in hist]
            line, = ax.plot(epochs, [r["val"] for r in hist], label=f"seed {run.seed} val")
            ax.plot(epochs, [r["test"] for r in hist], "--", color=line.get_color(), label=f"seed {run.seed} test")
        metric = group[0].result["metric"] if group[0].result else "metric"
        ax.set(title=name, xlabel="epoch", ylabel=metric)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def write_reports(runs: Sequence[BenchRun], out: Path, info: dict | None = None) -> None:
    r"""Writes ``results.csv``, ``results.md`` and ``curves.png`` into ``out`` (``info``: ``bench.json``, whose
    run records keep runs of different settings apart)."""
    rows = result_rows(runs, info)
    more = more_keys([run.result for run in runs if run.result is not None])
    table, page, curves = (out / name for name in REPORT_FILES)
    with atomic_write(table, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*CSV_COLUMNS, *(f"test_{k}" for k in more)])
        writer.writeheader()
        writer.writerows(rows)
    write_text(page, markdown(runs, info))
    plot_curves(runs, curves)


def plot_depth_sweep(runs: Sequence[BenchRun], path: Path) -> None:
    r"""Test accuracy (solid) and, where the runs measured it (``trainer.eval_train``), train accuracy (dashed, the
    model's colour) against tree depth per model, mean ± std over seeds, like GEAET's Figure 7 (whose benchmark,
    Alon & Yahav's, reports training accuracy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: {"test": defaultdict(list), "train": defaultdict(list)})
    radii: set[int] = set()
    for run in runs:
        res = run.result
        name = run.recipe.name
        if res is None or "-tree-r" not in name:
            continue
        model, depth = name.rsplit("-tree-r", 1)
        for split in ("test", "train"):
            if split in res:
                points[model][split][int(depth)].append(res[split])
                radii.add(int(depth))
    fig, ax = plt.subplots(figsize=(6, 4))
    for model, splits in points.items():
        colour = None
        for split, style in (("test", "-"), ("train", "--")):
            by_depth = splits[split]
            if not by_depth:
                continue
            depths = sorted(by_depth)
            stats = [mean_std(by_depth[d]) for d in depths]
            bars = ax.errorbar(depths, [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3,
                               linestyle=style, color=colour, label=f"{model} {split}")
            colour = bars.lines[0].get_color()
    ax.set(xlabel="problem radius r", ylabel="accuracy (test solid, train dashed)", ylim=(0, 1.05),
           title="TreeNeighbourMatch (GEAET Fig. 7)", xticks=sorted(radii))  # radii are integers: no tick at 2.5
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
