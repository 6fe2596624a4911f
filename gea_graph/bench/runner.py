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
  that computes several, e.g. PCQM-Contact's ``test_hits@1`` ... ``test_mrr_filtered``);
- ``results.md``: per dataset, mean ± std (population, as GraphGPS) over seeds per recipe and its parameter count,
  with the published number (and the published further values) beside it where the recipe copies a paper;
- ``curves.png``: validation (solid) and test (dashed) metric against epoch, one panel per recipe, one line per seed.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from gea_graph.data import DATASETS
from gea_graph.data.files import (
    append_to,
    atomic_write,
    ensure_folder,
    save_figure,
    write_json,
    write_text,
)
from gea_graph.train.recipe import Recipe, load_recipe, resolve_recipe
from gea_graph.train.run import (
    METRICS_FILE,
    PAUSED_EXIT_CODE,
    check_run_dir,
    read_metrics,
    read_result,
)

BENCH_FILE = "bench.json"
LOG_FILE = "train.log"
CSV_COLUMNS = ("recipe", "dataset", "seed", "params", "epochs", "best_val_epoch", "val_metric", "test_metric",
               "train_time_s", "peak_memory_mb", "metric")


@dataclass
class BenchRun:
    r"""One recipe x seed of a benchmark. ``status`` after :func:`run_bench`: ``complete`` (its ``result.json``
    exists), ``paused`` (stopped cleanly by ``stop_after``; it resumes from its last epoch), ``failed`` or
    ``pending`` (not started in this invocation)."""

    recipe: Recipe
    path: Path
    seed: int
    run_dir: Path
    status: str = "pending"

    @property
    def result(self) -> dict | None:
        return read_result(self.run_dir)


def plan(recipes: Sequence[str], seeds: Sequence[int] | None, out_dir: Path,
         overrides: Sequence[str] = ()) -> list[BenchRun]:
    r"""The runs of a benchmark (the recipe's own seeds unless ``seeds`` is given)."""
    runs = []
    for spec in recipes:
        path = resolve_recipe(spec)
        recipe = load_recipe(path, overrides)
        for seed in (seeds if seeds is not None else recipe.trainer.seeds):
            runs.append(BenchRun(recipe, path, seed, out_dir / recipe.name / f"seed{seed}"))
            check_run_dir(runs[-1].run_dir, recipe)  # a run of other overrides is neither skipped nor resumed
    return runs


def train_command(run: BenchRun, overrides: Sequence[str], max_time: float | None,
                  trainer_args: Sequence[str], stop_after: float | None = None) -> list[str]:
    r"""The ``gea-graph train`` command line of one run."""
    cmd = [sys.executable, "-m", "gea_graph", "train", str(run.path), *overrides, "--out", str(run.run_dir),
           "--seed", str(run.seed), "--resume", "--no-progress", *trainer_args]
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
            "python": platform.python_version(), "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "commit": _git_commit()}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                             cwd=Path(__file__).resolve().parent)
    except OSError:
        return None
    return out.stdout.strip() or None


def bench_info(out: Path, command: str | None, jobs: int, threads: int | None, max_time: float | None,
               overrides: Sequence[str]) -> dict:
    r"""``bench.json`` of ``out`` updated for a new invocation (earlier invocations of a resumed bench are kept)."""
    path = out / BENCH_FILE
    info = json.loads(path.read_text()) if path.is_file() else {"invocations": []}
    info.update({"command": command, "jobs": jobs, "threads": threads, "max_time_min": max_time,
                 "overrides": list(overrides), "machine": machine_info()})
    return info


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


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
              stop_after: float | None = None) -> list[BenchRun]:
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
        trainer_args: Extra ``gea-graph train`` flags (placement).
        jobs: Runs training at the same time (each a process).
        threads: Torch threads of each run (``--threads`` and ``OMP_NUM_THREADS``; ``None``: torch's default).
        command: The command line that started the bench (recorded in ``bench.json``).
        log: Progress printer.
        poll: Seconds between checks of the running processes.
        stop_after: Stop this invocation cleanly after so many minutes (see above).
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1 (got {jobs})")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1 (got {threads})")
    out = Path(out_dir)
    ensure_folder(out)
    runs = plan(recipes, seeds, out, overrides)
    info = bench_info(out, command, jobs, threads, max_time, overrides)
    session = {"start": _now(), "end": None, "load_average": [], "commit": info["machine"]["commit"],
               "stop_after_min": stop_after}
    info["invocations"].append(session)
    write_json(out / BENCH_FILE, info)
    extra = list(trainer_args) + (["--threads", str(threads)] if threads is not None else [])
    env = dict(os.environ)
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
                proc = subprocess.Popen(train_command(run, overrides, max_time, extra, left), env=env,
                                        stdout=sink, stderr=subprocess.STDOUT if sink is not None else None)
                active.append((tag, run, proc, sink))
                started += 1
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
                    log(f"{tag}: done")
    write_reports(runs, out)
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


def result_rows(runs: Sequence[BenchRun]) -> list[dict[str, object]]:
    r"""The ``results.csv`` rows of the complete runs."""
    rows = []
    for run in runs:
        res = run.result
        if res is None:
            continue
        rows.append({"recipe": res["recipe"], "dataset": res["dataset"], "seed": res["seed"],
                     "params": res["params"], "epochs": res["epochs"], "best_val_epoch": res["best_epoch"],
                     "val_metric": res["val"], "test_metric": res["test"], "train_time_s": res["train_time_s"],
                     "peak_memory_mb": res["peak_memory_mb"], "metric": res["metric"],
                     **{f"test_{k}": v for k, v in res.get("test_more", {}).items()}})
    return rows


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    r"""Mean and population standard deviation (``np.std``, ddof 0, as GraphGPS's aggregation)."""
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _fmt(values: Sequence[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.4f} ± {std:.4f}"


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


def markdown(runs: Sequence[BenchRun]) -> str:
    r"""``results.md``: a table per dataset, one line per recipe (mean ± std over its complete seeds)."""
    by_dataset: dict[str, dict[str, list[BenchRun]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.result is not None:
            by_dataset[run.result["dataset"]][run.recipe.name].append(run)
    lines = ["# Benchmark results", "",
             "Test metric read at the best-validation epoch of each seed; mean ± population std over seeds.", ""]
    for dataset, recipes in by_dataset.items():
        first = next(iter(recipes.values()))[0].result
        direction = "higher is better" if first["higher_is_better"] else "lower is better"
        more = more_keys([r.result for group in recipes.values() for r in group])
        lines += [f"## {dataset} ({first['metric']}, {direction})", "",
                  "| recipe | params | seeds | epochs | val | test | " + "".join(f"test {k} | " for k in more)
                  + "paper |", "|---" * (7 + len(more)) + "|"]
        for name, group in recipes.items():
            res = [r.result for r in group]
            epochs = sorted({r["epochs"] for r in res})
            extra = "".join(f"{_fmt_more(res, key)} | " for key in more)
            lines.append(f"| {name} | {res[0]['params']:,} | {len(res)} | {'/'.join(map(str, epochs))} | "
                         f"{_fmt([r['val'] for r in res])} | {_fmt([r['test'] for r in res])} | {extra}"
                         f"{_published(group[0].recipe.paper)} |")
        info = DATASETS.get(dataset)
        flagged = [name for name, group in recipes.items()
                   if info is not None and info.caveat_for(group[0].recipe.data.options) is not None]
        if flagged:  # e.g. ZINC read with OGB features: only those rows are not comparable with the paper
            lines += ["", f"Note ({', '.join(flagged)}): {info.caveat}"]
        lines.append("")
    if not by_dataset:
        lines.append("No complete runs.")
    return "\n".join(lines) + "\n"


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


def write_reports(runs: Sequence[BenchRun], out: Path) -> None:
    r"""Writes ``results.csv``, ``results.md`` and ``curves.png`` into ``out``."""
    rows = result_rows(runs)
    more = more_keys([run.result for run in runs if run.result is not None])
    with atomic_write(out / "results.csv", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*CSV_COLUMNS, *(f"test_{k}" for k in more)])
        writer.writeheader()
        writer.writerows(rows)
    write_text(out / "results.md", markdown(runs))
    plot_curves(runs, out / "curves.png")


def plot_depth_sweep(runs: Sequence[BenchRun], path: Path) -> None:
    r"""Test accuracy (mean ± std over seeds) against tree depth per model, like GEAET's Figure 7."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        res = run.result
        name = run.recipe.name
        if res is None or "-tree-r" not in name:
            continue
        model, depth = name.rsplit("-tree-r", 1)
        points[model][int(depth)].append(res["test"])
    fig, ax = plt.subplots(figsize=(6, 4))
    for model, by_depth in points.items():
        depths = sorted(by_depth)
        stats = [mean_std(by_depth[d]) for d in depths]
        ax.errorbar(depths, [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3, label=model)
    ax.set(xlabel="problem radius r", ylabel="test accuracy", ylim=(0, 1.05),
           title="TreeNeighbourMatch (GEAET Fig. 7)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
