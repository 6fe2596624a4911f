r"""Writes docs/results.md (and its pictures in docs/results/) from ``gea-graph bench`` output folders. Never edit
the page by hand: rerun this script.

    python scripts/make_results.py docs/results/runs/zinc-cpu-10min docs/results/runs/peptides-func-cpu-30min \
        docs/results/runs/tree-depth-cpu

The CPU suites write into ``docs/results/runs/<suite>`` (``gea-graph bench --suite S --out docs/results/runs/S``),
whose small files (``bench.json``, ``results.csv``, each run's ``recipe.yaml``, ``metrics.csv``, ``result.json``;
not the checkpoints, nor the logs, which name local paths) are committed: a suite of several hours is measured over
several sessions, each one resuming it (finished runs are skipped) and rewriting the page from all measured so far.

Each folder is read through its ``bench.json`` (the command, jobs, threads, cap, machine, dates and load average the
runner recorded), its ``results.csv`` and every run's ``recipe.yaml`` and ``result.json``. A folder made by one of
the page's suites fills that suite's section; a folder whose machine had a GPU goes to "GPU reproductions"; any other
folder gets a section of its own. Sections without a folder say "not yet measured". The GPU reproduction queue is
part of the page (:data:`GPU_QUEUE`).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gea_graph import checks
from gea_graph.bench.runner import device_label, epochs_cell, variant_labels
from gea_graph.io import copy_file, ensure_folder, write_text
from gea_graph.sweep.report import storage_words
from gea_graph.train.recipe import load_yaml


@dataclass(frozen=True)
class Section:
    r"""A suite's section of the page: its title, what it measures, and the pictures the bench draws for it."""

    suite: str
    title: str
    intro: str
    plots: tuple[str, ...] = ("curves.png",)


SECTIONS = (
    Section("zinc-cpu-10min", "ZINC, 10 CPU minutes per run",
            "Every model family on ZINC-12k (the papers' 28 atom types), each run capped at 10 minutes of training "
            "on one CPU thread with two runs side by side, 2 seeds; test MAE at the best validation epoch within the "
            "budget. PyG's GPS example (`pyg-gps-zinc`) and a plain PyG GINE network (`pyg-gine-zinc`) run in the "
            "same bench with PyG's example settings. Goals (issue 11): best test MAE ≤ 0.080, at least 2× lower than "
            "PyG's GPS example at equal time, and each MPNN + GEANet better than the same MPNN without it."),
    Section("peptides-func-cpu-30min", "Peptides-func, 30 CPU minutes per run",
            "GCN, GCN + GEANet and GEAET on Peptides-func (LRGB), each run capped at 30 minutes of training on one "
            "CPU thread with two runs side by side, 2 seeds; test AP at the best validation epoch within the budget. "
            "Goals (issue 22): GEAET fits at least 9 epochs into its 30 minutes (three times the 3 of the issue), and "
            "no run's resident memory goes past 3 GiB."),
    Section("tree-depth-cpu", "TreeNeighbourMatch, accuracy against depth",
            "The five models of GEAET's Figure 7 on TreeNeighbourMatch with problem radius 2 to 6 (r = 5 and 6 on "
            "16,384 and 8,192 random graphs a split, so that GEAET fits some epochs into the cap), each run capped "
            "at 7 CPU minutes (one thread, two runs side by side), 2 seeds; test accuracy at the best validation "
            "epoch, and the training accuracy of that epoch's checkpoint (eval mode), which the original benchmark "
            "(Alon & Yahav) reports. The recipes' cosine runs over each run's budget (the 7 minutes, or the recipe's "
            "epochs when those end it first) without warm-up. A run's time and its cap count each epoch's "
            "evaluation (val and test).",
            plots=("tree-depth-cpu.png", "curves.png")),
)


@dataclass(frozen=True)
class QueueItem:
    r"""One entry of the GPU reproduction queue: the recipes (each with its own seeds, epochs and published number)
    and the expected time of one run."""

    what: str
    recipes: tuple[str, ...]
    out: str
    expected: str
    status: str = "not started"


#: Where the CPU suites' bench outputs are kept (committed, without checkpoints; see the module docstring).
RUNS = "docs/results/runs"

#: The paper suites to run whenever a GPU is available, first things first.
GPU_QUEUE = (
    QueueItem("Peptides-func, GCN + GEANet (GEAET Table 7, 8 heads, LapPE)", ("gcn-geanet-peptides-func",),
              "docs/results/gpu/queue/peptides-func",
              "about 19 minutes for the 4 seeds at once on an H200 (4.5 s an epoch each, measured in chunk 1)",
              "restarts from epoch 0 at its next chunk: chunks 1-3 (NVIDIA H200, 2026-11-26/27) reached epochs 91-100 "
              "of 250 by seed, but their state was kept only on a development machine that is gone"),
    QueueItem("ZINC, GEAET (GatedGCN + Transformer + GEANet, RWPE)", ("geaet-zinc",),
              "docs/results/gpu/queue/zinc-geaet",
              "not yet timed: 2,000 epochs of 313 steps (batch 32) a seed, hours on one GPU"),
    QueueItem("ZINC, Graphormer and Graphormer + GFSA (GFSA Table 14, GraphormerSLIM)",
              ("graphormer-zinc", "graphormer-gfsa-zinc"), "docs/results/gpu/queue/zinc-gfsa",
              "not yet timed: 10,000 epochs of 40 steps (batch 256) a seed, hours on one GPU"),
)


#: How the queue runs on a GPU lent in short windows, as ``scripts/gpu_chunk.sh`` does it (the procedure
#: ``tests/bench/test_bench_chunks.py`` tests on CPU: a bench stopped by ``--stop-after`` resumes in a copy of its
#: folder and reaches the uninterrupted result).
GPU_CHUNKS = """### GPU work in chunks

GPU time comes in windows: a session is lent at most 15 minutes of device time (starting the machine takes about a
minute of it), one command runs at most 10 minutes, at most 64 MiB travel to the GPU machine (the working tree and
the carried folders) and at most 8 files (16 MiB each) come back. A queue item therefore runs as a series of chunks,
each `bash scripts/gpu_chunk.sh WINDOW_S BENCH RECIPES SEEDS [selfcheck] [perf]` with a window of at most 540 s:
`gea-graph bench ... --stop-after MINUTES` stops each run at an epoch's end with its `last.ckpt` written (exit code 3
while runs remain), and the same command on a copy of its folder, on any machine, goes on where it stopped.

**Where the state lives.** The master copy of an item's resumable state is in git: `docs/results/gpu/queue/BENCH`
(`bench.json`, each run's `recipe.yaml`, `metrics.csv`, `logs/` and `checkpoints/last.ckpt`; no `best.ckpt`: the page
reads a run's best epoch from its metrics). Any clone holds it, and it reaches the GPU machine as tracked files of the
checkout; the chunk trains a scratch copy there and returns the new state in `$OUT`. For item 1 (the others alike):

1. Once per development machine (nothing of it is committed; git ignores both folders): the RDKit and OGB wheels,
   which the GPU machine lacks, and the raw data (a built data root is too large to carry: Peptides-func with
   the recipe's LapPE-10 takes 260 MiB beside its 59 MiB plain build, by `du -sh` of the two folders that `gea-graph
   data prepare peptides-func --pe lap:10:norm=none:trivial=keep:pad=nan` names, commit 1e3573b; so each chunk builds
   it there):
   `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform
   manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl rdkit==2026.9.1 ogb==1.3.6 outdated==0.2.2
   littleutils==0.2.4; mkdir -p gpu-carry/mirror; cp -r ../shared/data/peptides-func ../shared/data/zinc-subset
   gpu-carry/mirror/`
2. The chunk, one device command carrying `.whl` and `gpu-carry/mirror`, with a 600-second limit: `bash
   scripts/gpu_chunk.sh 540 peptides-func gcn-geanet-peptides-func 0,1,2,3`. Add `selfcheck` (up to 150 s) in a
   lease's first chunk and `perf` (the CUDA table of docs/performance.md, up to 300 s, each row saved as soon as it is
   measured) when wanted; with both, little or no time is left to train (the script exits 4 when not one whole minute
   is). The script installs the wheels, builds the data first (each queue recipe's and, with `perf`, its rows'),
   trains a scratch copy of the state folder (all runs at once, `trainer.compile=reduce-overhead`, `--stop-after` the
   whole minutes left less 75 s) and leaves in `$OUT` `check.tgz`, `bench.tgz` and one archive per run (under 16 MiB
   each; a bench of more than 6 runs goes in several benches, e.g. one per recipe). A run is saved only at an epoch
   end: if its first epoch, compiling included, outlasts the bench's window, the chunk brings back no state and says
   so; give the bench a whole chunk then.
3. Back on any development machine, unpack and commit (the script's header):
   `mkdir -p docs/results/gpu/queue/peptides-func; for f in FILES_AT/bench.tgz FILES_AT/*-seed*.tgz; do tar xzf $f
   -C docs/results/gpu/queue/peptides-func; done` and `find docs/results/gpu/queue/peptides-func -name best.ckpt
   -delete; git add docs/results/gpu/queue/peptides-func; git commit`. Each such commit adds the runs' checkpoints
   (about 22 MiB for item 1: 4 runs of a 5.7 MB `last.ckpt`, as `gea-graph train gcn-geanet-peptides-func
   trainer.max_epochs=1 data.subset=32` writes it at commit 1e3573b) to the history. Repeat 2-3 until the bench
   exits 0: every run has its `result.json`.
4. Add `docs/results/gpu/queue/peptides-func` to this page's command: the item goes to "GPU reproductions" (its
   `bench.json` names the GPU and every invocation's commit). Then delete its checkpoints (`find
   docs/results/gpu/queue/peptides-func -name '*.ckpt' -delete`) and commit.

**What travels.** A chunk's working tree is at most 64 MiB; `du -cb .whl gpu-carry/mirror $(git ls-files) | tail
-1` gives it. At commit 37762d8 the tracked files are 6.3 MiB, the wheels 30.4 MiB and the raw data 1.8 MiB; item
1's state adds 4 runs x 5.4 MiB (a 463k-parameter model with Adam's moments in each `last.ckpt`), about 60 MiB in
all. So the tree holds one item's checkpoints at a time (step 4), and item 3 (8 runs) goes as one bench per recipe.

Chunks 1-3 of item 1 ran on an NVIDIA H200 on 2026-11-26 and 27 (commits b9ca8d7 and 5dababe, the eager step): the
4 seeds at once at about 4.5 s an epoch each (65 epochs in `--stop-after 5`: the runs' `metrics.csv`, as this page
recorded at commit 5804db2), to epochs 91-100 of 250 by seed. That state was an ignored folder of the development
machine that ran them, so it was lost with that machine and item 1 starts again; committed after every chunk, the
state now lives wherever the repository does.
"""


def queue_rows() -> list[str]:
    r"""The queue as table rows, the seeds, epochs and published numbers read from the recipes."""
    from gea_graph.train.recipe import load_recipe

    rows = []
    for i, item in enumerate(GPU_QUEUE, 1):
        recipes = [load_recipe(name) for name in item.recipes]
        seeds = recipes[0].trainer.seeds
        command = (f"gea-graph bench --recipes {','.join(item.recipes)} --seeds {','.join(map(str, seeds))} "
                   f"--out {item.out}")
        runs = f"{len(recipes)} x {len(seeds)} seeds x {recipes[0].trainer.max_epochs:,} epochs"
        papers = "; ".join(f"{r.name}: {r.paper.metric} {r.paper.value:g}"
                           + (f" ± {r.paper.std:g}" if r.paper.std is not None else "") + f" ({r.paper.source})"
                           for r in recipes if r.paper is not None) or "–"
        rows.append(f"| {i} | {item.what} | `{command}` | {runs} | {item.expected} | {papers} | {item.status} |")
    return rows


# -- reading a bench folder -------------------------------------------------------------------------------------------


@dataclass
class Bench:
    r"""One ``gea-graph bench`` output folder."""

    path: Path
    info: dict
    runs: list[dict] = field(default_factory=list)  # result.json of each run, plus "description" and "paper"

    @property
    def suite(self) -> str | None:
        words = (self.info.get("command") or "").split()
        return words[words.index("--suite") + 1] if "--suite" in words else None

    @property
    def seeds(self) -> list[int] | None:
        r"""The seeds its command chose (``--seeds``), else ``None`` (the suite's or the recipes' own)."""
        words = (self.info.get("command") or "").split()
        return [int(s) for s in words[words.index("--seeds") + 1].split(",")] if "--seeds" in words else None

    @property
    def gpu(self) -> str | None:
        return (self.info.get("machine") or {}).get("gpu")


def read_bench(path: Path) -> Bench:
    r"""The bench in ``path`` (its ``results.csv`` lists the complete runs)."""
    info_path = path / "bench.json"
    if not info_path.is_file():
        raise SystemExit(f"make_results: {path} has no bench.json (not a gea-graph bench output folder)")
    bench = Bench(path, json.loads(info_path.read_text()))
    csv_path = path / "results.csv"
    rows = []
    if csv_path.is_file():
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
    records = bench.info.get("runs") or {}
    for row in rows:
        try:  # a name is one path component: results.csv never sends the reading outside the bench folder
            key = f"{checks.name(row['recipe'], 'recipe')}/seed{checks.seed(row['seed'], 'seed')}"
        except checks.BadValue as err:
            raise SystemExit(f"make_results: {csv_path}: {err}") from None
        run_dir = path / key
        result = json.loads((run_dir / "result.json").read_text())
        recipe = load_yaml((run_dir / "recipe.yaml").read_text(), str(run_dir / "recipe.yaml")) \
            if (run_dir / "recipe.yaml").is_file() else {}
        result["description"] = (recipe or {}).get("description", "")
        result["paper"] = (recipe or {}).get("paper")
        result["record"] = records.get(key)  # its own cap, threads, jobs and code (None in older bench folders)
        bench.runs.append(result)
    for name in dict.fromkeys(run["recipe"] for run in bench.runs):  # runs that differ are never averaged
        own = [run for run in bench.runs if run["recipe"] == name]
        for run, label in zip(own, variant_labels([run["record"] for run in own])):
            run["row"] = name + label
    return bench


# -- formatting -------------------------------------------------------------------------------------------------------


def mean_std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _pm(values: list[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.4f} ± {std:.4f}"


def epochs_column(runs: list[dict]) -> str:
    r"""The epochs of a recipe's runs, one per seed: ``8/8``; ``2 of 8\*/8`` where a time cap ended a run early, and
    ``2/3 of 8\*`` where it ended every run of the same plan."""
    planned = {r.get("epochs_planned") for r in runs}
    if len(planned) == 1 and all(r.get("cut_by_time_cap") for r in runs):
        return "/".join(str(r["epochs"]) for r in runs) + f" of {planned.pop() or '?'}\\*"
    return "/".join(epochs_cell(r) for r in runs)


def leaderboard(bench: Bench) -> tuple[list[str], dict[str, float]]:
    r"""The table of a bench (one line per recipe, best test mean first) and the test mean of each recipe."""
    groups: dict[str, list[dict]] = {}
    for run in bench.runs:
        groups.setdefault(run["row"], []).append(run)
    if not groups:
        return ["No complete runs yet."], {}
    first = next(iter(groups.values()))[0]
    sign = -1.0 if first["higher_is_better"] else 1.0
    means = {name: mean_std([r["test"] for r in runs])[0] for name, runs in groups.items()}
    metric = first["metric"].upper() if first["metric"] in ("mae", "ap", "mrr") else first["metric"]
    lines = [(f"| # | recipe | params | seeds | epochs in budget | best epoch | val {metric} | test {metric} | "
             "train time | peak memory |"),
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for rank, name in enumerate(sorted(groups, key=lambda n: sign * means[n]), 1):
        runs = groups[name]
        label = f"{name} (PyG peer)" if name.startswith("pyg-") else name
        epochs = epochs_column(runs)
        best = "/".join(str(r["best_epoch"] + 1) for r in runs)
        minutes = mean_std([r["train_time_s"] / 60 for r in runs])[0]
        memory = max(r["peak_memory_mb"] for r in runs)
        lines.append(f"| {rank} | {label} | {runs[0]['params']:,} | {len(runs)} | {epochs} | {best} | "
                     f"{_pm([r['val'] for r in runs])} | {_pm([r['test'] for r in runs])} | {minutes:.1f} min | "
                     f"{memory:,.0f} MiB |")
    if any(r.get("cut_by_time_cap") for runs in groups.values() for r in runs):
        lines += ["", "\\* cut by the time cap before its planned epochs (`result.json`: `cut_by_time_cap`)."]
    return lines, means


def depth_table(bench: Bench) -> list[str]:
    r"""Test and train accuracy per model (rows) and tree depth (columns), mean ± std over seeds (GEAET Figure 7 as
    a table). A train cell needs every run of it to have measured it (``trainer.eval_train``); else it reads –. The
    suite's depths without a complete run are named below the table."""
    cells: dict[str, dict[int, list[dict]]] = {}
    for run in bench.runs:
        if "-tree-r" in run["recipe"]:
            model, depth = run["recipe"].rsplit("-tree-r", 1)
            label = run["row"][len(run["recipe"]):]
            cells.setdefault(model + label, {}).setdefault(int(depth), []).append(run)
    if not cells:
        return []
    depths = sorted({d for by_depth in cells.values() for d in by_depth})
    lines = ["| model | accuracy | " + " | ".join(f"r={d}" for d in depths) + " |",
             "|---|---|" + "---:|" * len(depths)]

    def cell(group: list[dict] | None, split: str) -> str:
        if not group or any(split not in run for run in group):
            return "–"
        return _pm([run[split] for run in group])

    for model, by_depth in cells.items():
        for split in ("test", "train"):
            lines.append(f"| {model} | {split} | " + " | ".join(cell(by_depth.get(d), split) for d in depths) + " |")
    return [("Accuracy by depth (test at the best validation epoch; train: that epoch's checkpoint on the training "
             "split, – for runs made before it was measured):"), "", *lines, ""]


def missing_runs(bench: Bench) -> list[str]:
    r"""The runs of the bench's suite (its recipes x its seeds, or the command's ``--seeds``; in the suite's order)
    without a complete run: a recipe with none by its name, one with some by its name and missing seeds (nothing for
    a bench of no known suite, or a complete one)."""
    from gea_graph.bench.suites import SUITES

    suite = SUITES.get(bench.suite or "")
    if suite is None:
        return []
    done = {(run["recipe"], int(run["seed"])) for run in bench.runs}
    missing = []
    for recipe in suite.recipes:
        wanted = bench.seeds or suite.seeds_of(recipe)
        seeds = [s for s in wanted if (recipe, s) not in done]
        if len(seeds) == len(wanted):
            missing.append(recipe)
        elif seeds:
            missing.append(f"{recipe} (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})")
    if not missing:
        return []
    return [(f"Not yet measured: {', '.join(missing)} (in the suite; rerunning its command below skips the "
             "complete runs and trains these)."), ""]


def zinc_goals(bench: Bench, means: dict[str, float]) -> list[str]:
    r"""The issue's ZINC goals, checked on the measured means (a goal whose runs are missing says so)."""
    if not means:
        return []
    ours = {k: v for k, v in means.items() if not k.startswith("pyg-")}
    lines = ["Goals, checked on the means above:", ""]
    if ours:
        best = min(ours, key=ours.get)
        lines.append(f"- best recipe {best}: test MAE {ours[best]:.4f} "
                     f"({'met' if ours[best] <= 0.080 else 'not met'}: ≤ 0.080)")
        if "pyg-gps-zinc" in means:
            ratio = means["pyg-gps-zinc"] / ours[best]
            lines.append(f"- PyG's GPS example / best recipe: {ratio:.2f}× "
                         f"({'met' if ratio >= 2 else 'not met'}: ≥ 2×)")
    for mpnn in ("gatedgcn", "gcn", "gin"):
        plus, plain = f"{mpnn}-geanet-zinc-cpu", f"{mpnn}-zinc-cpu"
        if plus in means and plain in means:
            better = means[plus] < means[plain]
            lines.append(f"- {plus} {means[plus]:.4f} vs {plain} {means[plain]:.4f} "
                         f"({'met' if better else 'not met'}: GEANet better at equal time)")
    return lines + [""]


#: Issue 22's goals for the Peptides-func suite: GEAET's epochs within the 30 minutes (3 when the issue was filed;
#: three times as many) and the peak resident memory of every run.
PEPTIDES_GEAET, PEPTIDES_GEAET_EPOCHS, PEPTIDES_PEAK_MIB = "geaet-peptides-func-cpu", 9, 3072


def peptides_goals(bench: Bench, means: dict[str, float]) -> list[str]:
    r"""Issue 22's Peptides-func goals, checked on every run of the bench (the fewest epochs, the largest peak)."""
    if not bench.runs:
        return []
    lines = ["Goals (issue 22), checked on every run above:", ""]
    geaet = [run["epochs"] for run in bench.runs if run["recipe"] == PEPTIDES_GEAET]
    if geaet:
        lines.append(f"- {PEPTIDES_GEAET}: {min(geaet)} epochs in the budget, the fewest of its runs "
                     f"({'met' if min(geaet) >= PEPTIDES_GEAET_EPOCHS else 'not met'}: ≥ {PEPTIDES_GEAET_EPOCHS}, "
                     "three times the 3 of the issue)")
    for name in dict.fromkeys(run["recipe"] for run in bench.runs):
        peak = max(run["peak_memory_mb"] for run in bench.runs if run["recipe"] == name)
        lines.append(f"- {name}: peak memory {peak:,.0f} MiB, the largest of its runs "
                     f"({'met' if peak <= PEPTIDES_PEAK_MIB else 'not met'}: ≤ {PEPTIDES_PEAK_MIB:,} MiB)")
    return lines + [""]


#: The goals each suite's section checks.
GOALS: dict[str, Callable[[Bench, dict[str, float]], list[str]]] = {
    "zinc-cpu-10min": zinc_goals, "peptides-func-cpu-30min": peptides_goals}


#: What runs made on a commit did differently from the code since, found after they ran: the page says it under
#: every bench with an invocation of that commit (and no longer once the bench is rerun).
COMMIT_NOTES: dict[str, str] = {
    "7165257": (
        "a time cap that ran out during an epoch's evaluation let the run start one more epoch, one training step at "
        "a learning rate of 0 and a second evaluation (GEAET's 8.6 and 8.7 minutes at r = 5 and 6 of "
        "tree-depth-cpu; a run ends at that epoch since, `gea_graph.train.callbacks.EndAtTimeCap`); training used "
        "PyTorch's fused AdamW (the same update to float rounding; CPU training uses the loop AdamW since, "
        "docs/design.md, DDP); a run's peak memory was at least the bench process's (Linux passes `ru_maxrss` on "
        "to a child; a run reads its own `VmHWM` since, `gea_graph.train.memory.peak_resident_mib`)"),
}


def how_it_ran(bench: Bench, page: Path) -> list[str]:
    r"""The command, the machine, the threads and jobs, the dates and the load average of a bench."""
    info = bench.info
    machine = info.get("machine") or {}
    sessions = info.get("invocations") or []
    loads = [v for s in sessions for v in s.get("load_average", [])]
    dates = f"{sessions[0]['start']} to {sessions[-1].get('end') or 'unfinished'}" if sessions else "unknown"
    lines = [
        f"Made by `{info.get('command') or '(command not recorded)'}` (output folder `{_rel(bench.path, page)}`).",
        "",
        _machine_line(bench, machine, sessions),
        _settings_line(bench),
        (f"- software: Python {machine.get('python')}, torch {machine.get('torch')}, PyG "
        f"{machine.get('torch_geometric')}, gea-graph {_commits(sessions, machine)}"),
        f"- dates: {dates} ({len(sessions)} invocation{'s' if len(sessions) != 1 else ''})",
    ]
    lines += [f"- made on commit {commit}: {COMMIT_NOTES[commit]}"
              for commit in dict.fromkeys(s.get("commit") for s in sessions) if commit in COMMIT_NOTES]
    if loads:
        cores = machine.get("cores") or 1
        note = "a quiet machine" if max(loads) <= 1.25 * cores else "other work shared the machine"
        lines.append(f"- load average (1 min, sampled each minute): mean {sum(loads) / len(loads):.1f}, max "
                     f"{max(loads):.1f} on {cores} cores ({note}; times under a time cap depend on it)")
    return lines + [""]


def _machine_line(bench: Bench, machine: dict, sessions: list[dict]) -> str:
    r"""The machine of the bench; where its invocations ran on different machines (or some predate the
    per-invocation record), each machine with its invocations and the runs it trained (a capped run's epochs depend
    on the machine)."""
    last = device_label(machine)
    devices = [s.get("device") for s in sessions[:-1]] + [last]  # the top-level machine is the last invocation's
    if all(d == last for d in devices):
        return f"- machine: {last}; {machine.get('platform', '')}"
    parts = []
    for device in dict.fromkeys(devices):
        numbers = [str(i + 1) for i, d in enumerate(devices) if d == device]
        which = f"invocation{'s' if len(numbers) > 1 else ''} {', '.join(numbers)}"
        if device is None:
            parts.append(f"not recorded for {which} (made before each invocation recorded its machine)")
            continue
        runs = sorted({run["recipe"] for run in bench.runs if device in ((run["record"] or {}).get("devices") or [])})
        parts.append(f"{device} for {which}" + (f" (runs of {', '.join(runs)})" if runs else ""))
    return f"- machines: {'; '.join(parts)}; {machine.get('platform', '')} (the last invocation's platform)"


def _settings_line(bench: Bench) -> str:
    r"""Runs at a time, threads and cap: each run's own (from ``bench.json``'s run records), or, for a bench folder
    made before runs had records, the values its ``bench.json`` holds for its last invocation (said so)."""
    records = [run["record"] for run in bench.runs]
    if bench.runs and all(records):
        values = {key: sorted({json.dumps(r.get(key)) for r in records}) for key in ("jobs", "threads", "max_time_min")}
        if any(len(v) > 1 for v in values.values()):
            return "- runs at a time, torch threads and cap per run: they differ between runs, see the rows"
        jobs, threads, cap = (json.loads(values[k][0]) for k in ("jobs", "threads", "max_time_min"))
        note = " (each run's own, from bench.json)"
    else:
        info = bench.info
        jobs, threads, cap = info.get("jobs"), info.get("threads"), info.get("max_time_min")
        note = (" (recorded once for the bench, by its last invocation; this bench.json predates per-run records)"
                if bench.runs else "")
    return (f"- runs at a time: {jobs}; torch threads per run: {threads or 'default'}; cap per run: "
            f"{f'{cap:g} min' if cap is not None else 'none'}{note}")


def _commits(sessions: list[dict], machine: dict) -> str:
    r"""The commits a bench ran on: each invocation's (a resumed bench may span several), else the last one's."""
    commits = list(dict.fromkeys(s["commit"] for s in sessions if s.get("commit"))) or [machine.get("commit")]
    if commits == [None]:
        return "commit unknown"
    return f"commit{'s' if len(commits) > 1 else ''} {', '.join(str(c) for c in commits)}"


def _rel(path: Path, page: Path) -> str:
    try:
        return str(path.resolve().relative_to(page.resolve().parents[1]))
    except ValueError:
        return str(path)


def copy_plots(bench: Bench, names: tuple[str, ...], page: Path, prefix: str) -> list[str]:
    r"""Copies the bench's pictures next to the page; returns their Markdown."""
    out = []
    folder = page.parent / "results"
    for name in names:
        src = bench.path / name
        if src.is_file():
            ensure_folder(folder)
            dst = folder / f"{prefix}-{name}" if not name.startswith(prefix) else folder / name
            copy_file(src, dst)
            out += [f"![{dst.stem}](results/{dst.name})", ""]
    return out


def bench_section(bench: Bench, title: str, intro: str, plots: tuple[str, ...], page: Path,
                  goals: Callable[[Bench, dict[str, float]], list[str]] | None = None) -> list[str]:
    lines = [f"## {title}", "", intro, ""]
    if "tree-depth-cpu.png" in plots:
        lines += depth_table(bench)
    table, means = leaderboard(bench)
    lines += table + [""] + missing_runs(bench)
    if goals is not None:
        lines += goals(bench, means)
    lines += copy_plots(bench, plots, page, bench.suite or bench.path.name)
    lines += how_it_ran(bench, page)
    return lines


def page(benches: list[Bench], out: Path) -> str:
    r"""The whole of docs/results.md."""
    by_suite = {b.suite: b for b in benches if b.suite is not None and b.gpu is None}
    lines = [
        "# Results", "",
        ("Every number on this page was produced by `gea-graph bench` from a recipe in `models/` and written here by "
        "`scripts/make_results.py` (never by hand); each section names the commands that made it, the machine, the "
        "threads and the dates. Test metrics are read at each seed's best validation epoch and given as mean ± "
        "population std over seeds. PyG's own models run in the same benches as peers (recipes `pyg-*`, built from "
        "PyG's classes with PyG's example settings)."), "",
        ("This page was written by (the folders are `gea-graph bench` outputs; "
         "those not given yet read \"not yet measured\"):"), "", "```",
        "python scripts/make_results.py " + (" ".join(_rel(b.path, out) for b in benches)
                                             or " ".join(f"{RUNS}/{s.suite}" for s in SECTIONS)), "```", "",
    ]
    for section in SECTIONS:
        bench = by_suite.pop(section.suite, None)
        if bench is None:
            lines += [f"## {section.title}", "", section.intro, "",
                      (f"Not yet measured. Run `gea-graph bench --suite {section.suite} --out {RUNS}/{section.suite}`, "
                      f"then `python scripts/make_results.py {RUNS}/{section.suite} ...`."), ""]
        else:
            lines += bench_section(bench, section.title, section.intro, section.plots, out,
                                   goals=GOALS.get(section.suite))
    for suite, bench in by_suite.items():
        lines += bench_section(bench, f"Suite {suite}", "", ("curves.png",), out)
    others = [b for b in benches if b.suite is None and b.gpu is None]
    for bench in others:
        lines += bench_section(bench, f"Bench {bench.path.name}", "", ("curves.png",), out)
    lines += ["## GPU reproduction queue", "",
              ("The paper suites to run whenever a GPU is available, first things first. CPU and GPU runs share the "
              "protocol (the same recipes, seeds and best-validation-epoch reading); the results go to the next "
              "section with the GPU's name."), "",
              "| # | what | command | runs | expected time | paper | status |", "|---:|---|---|---|---|---|---|"]
    lines += queue_rows()
    lines += ["", *GPU_CHUNKS.splitlines()]
    lines += ["", "## GPU reproductions", ""]
    gpus = [b for b in benches if b.gpu is not None]
    if not gpus:
        lines += ["Not yet measured.", ""]
    for bench in gpus:
        lines += bench_section(bench, f"{bench.suite or bench.path.name} on {bench.gpu}", "", ("curves.png",), out)
    return "\n".join(lines).rstrip() + "\n"

# -- tuned at equal budget (gea-graph sweep folders) -------------------------------------------------------------------

#: The question of the section: each MPNN (or GPS layer) against the same with GEANet, both tuned.
SWEEP_PAIRS = (("gatedgcn-zinc-cpu", "gatedgcn-geanet-zinc-cpu"), ("gps-zinc-cpu", "geaet-zinc-cpu"))
SWEEP_RUN = "docs/results/runs/sweep-zinc-cpu"
SWEEP_COMMAND = (f"gea-graph sweep {','.join(r for pair in SWEEP_PAIRS for r in pair)} --out {SWEEP_RUN} "
                 "--trials 20 --max-time 10 --max-params 300000 --jobs 2 --threads 1 --seed 0 --confirm 1,2")
SWEEP_INTRO = (
    "Does GEANet help when both sides are tuned? Each recipe gets the same number of Optuna trials (TPE, median "
    "pruning on the validation MAE at each epoch), the same time cap per trial and the same parameter cap, over the "
    "search space of its recipe's `sweep:` block (the keys two recipes share have the same ranges). Each recipe's "
    "best configuration is then retrained on 2 new seeds by `gea-graph bench`; the comparison reads those seeds' "
    "test MAE (at the best validation epoch), never the search's own best value. The answer is published whichever "
    "way it falls.")


@dataclass
class Sweep:
    r"""A ``gea-graph sweep`` folder: its ``sweep.json``, its ``trials.csv`` rows and its confirmation bench."""

    path: Path
    info: dict
    trials: list[dict]
    confirm: Bench | None


def read_sweep(path: Path) -> Sweep:
    info_path = path / "sweep.json"
    if not info_path.is_file():
        raise SystemExit(f"make_results: {path} has no sweep.json (not a gea-graph sweep output folder)")
    rows = []
    if (path / "trials.csv").is_file():
        with open(path / "trials.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    confirm = read_bench(path / "confirm") if (path / "confirm" / "bench.json").is_file() else None
    return Sweep(path, json.loads(info_path.read_text()), rows, confirm)


def _sweep_loads(sweep: Sweep) -> str:
    sessions = list(sweep.info.get("invocations") or []) + list((sweep.confirm.info if sweep.confirm else {})
                                                                 .get("invocations") or [])
    loads = [v for s in sessions for v in s.get("load_average", [])]
    if not loads:
        return "- load average: not recorded"
    cores = (sweep.info.get("machine") or {}).get("cores") or 1
    note = "a quiet machine" if max(loads) <= 1.25 * cores else "other work shared the machine"
    return (f"- load average (1 min, at each invocation's start and end, and each minute of the confirmation "
            f"bench): mean {sum(loads) / len(loads):.1f}, max {max(loads):.1f} on {cores} cores ({note})")


def sweep_lines(sweep: Sweep, page: Path) -> list[str]:
    r"""One sweep folder: how it ran, the trials per recipe, the confirmation seeds and the pairs' answers."""
    info, machine = sweep.info, sweep.info.get("machine") or {}
    sessions = info.get("invocations") or []
    commits = list(dict.fromkeys(s.get("commit") for s in sessions if s.get("commit"))) or [machine.get("commit")]
    cap = info.get("max_time_min")
    lines = [f"Made by `{info.get('command')}` (output folder `{_rel(sweep.path, page)}`"
             + (f"; confirmation: `{sweep.confirm.info.get('command')}`" if sweep.confirm else "") + ").", "",
             f"- machine: {device_label(machine)}; {machine.get('platform', '')}",
             (f"- software: Python {machine.get('python')}, torch {machine.get('torch')}, PyG "
              f"{machine.get('torch_geometric')}, gea-graph commit{'s' if len(commits) > 1 else ''} "
              f"{', '.join(str(c) for c in commits)}"),
             f"- study `{info.get('study')}` in {storage_words(info.get('storage'))}: {info.get('trials')} finished "
             "trials per recipe, "
             f"{f'{cap:g} min' if cap else 'no cap'} per trial, "
             + (f"at most {info['max_params']:,} parameters" if info.get("max_params") else "no parameter cap")
             + f", sampler {info.get('sampler')}, pruner {info.get('pruner')}, {info.get('jobs')} trial(s) at a time",
             (f"- dates: {sessions[0]['start'] if sessions else '?'} to "
              f"{(sessions[-1].get('end') if sessions else None) or 'unfinished'}"),
             _sweep_loads(sweep), ""]
    confirmed = {}
    for run in (sweep.confirm.runs if sweep.confirm else []):
        confirmed.setdefault(run["recipe"].removesuffix("-tuned"), []).append(run)
    lines += [("| recipe | trials (complete / pruned / failed) | best val of the search | params | confirmation "
               "seeds | epochs | val | test |"), "|---|---|---|---|---|---|---|---|"]
    means: dict[str, float] = {}
    for name in info.get("recipes") or {}:
        own = [r for r in sweep.trials if r["recipe"] == name]
        states = [sum(r["state"] == s for r in own) for s in ("COMPLETE", "PRUNED", "FAIL")]
        vals = [float(r["val_metric"]) for r in own if r["state"] == "COMPLETE" and r["val_metric"]]
        record = info["recipes"][name] or {}
        higher = bool(record.get("higher_is_better"))
        best = (max if higher else min)(vals) if vals else None
        runs = confirmed.get(name, [])
        cells = ["–"] * 4
        if runs:
            means[name] = mean_std([r["test"] for r in runs])[0]
            cells = [f"{runs[0]['params']:,}", ", ".join(str(r["seed"]) for r in runs),
                     "/".join(str(e) for e in sorted({r["epochs"] for r in runs})), _pm([r["val"] for r in runs])]
            cells.append(_pm([r["test"] for r in runs]))
        else:
            cells = ["–", "not confirmed yet", "–", "–", "–"]
        best_text = f"{best:.4f} ({record.get('metric')})" if best is not None else "–"
        lines.append(f"| {name} | {' / '.join(map(str, states))} | {best_text} | "
                     + " | ".join(cells) + " |")
    lines.append("")
    for plain, gea in SWEEP_PAIRS:
        if plain in means and gea in means:
            record = info["recipes"][gea] or {}
            better = means[gea] > means[plain] if record.get("higher_is_better") else means[gea] < means[plain]
            lines.append(f"- {gea} against {plain}, both tuned: test {record.get('metric')} {means[gea]:.4f} against "
                         f"{means[plain]:.4f} (mean over the confirmation seeds): GEANet "
                         f"{'helps' if better else 'does not help'} here.")
    folder = page.parent / "results"
    for name in info.get("recipes") or {}:
        for kind in ("history", "importance"):
            src = sweep.path / f"{kind}-{name}.png"
            if src.is_file():
                ensure_folder(folder)
                dst = folder / f"sweep-{sweep.path.name}-{kind}-{name}.png"
                copy_file(src, dst)
                lines += ["", f"![{kind} of {name}](results/{dst.name})"]
    return lines + [""]


def sweep_section(sweeps: list[Sweep], page: Path) -> list[str]:
    r"""The page's "Tuned at equal budget" section (from ``gea-graph sweep`` folders; their command when none)."""
    lines = ["## Tuned at equal budget", "", SWEEP_INTRO, ""]
    if not sweeps:
        return lines + [(f"Not measured yet: run, on a quiet machine, `{SWEEP_COMMAND}`, then "
                         f"`python scripts/make_results.py ... --sweep {SWEEP_RUN}`."), ""]
    for sweep in sweeps:
        lines += sweep_lines(sweep, page)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benches", nargs="*", type=Path, help="gea-graph bench output folders")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results.md",
                        help="the page (default: %(default)s)")
    parser.add_argument("--sweep", type=Path, action="append", default=[],
                        help="a gea-graph sweep output folder for the section \"Tuned at equal budget\" (repeatable)")
    args = parser.parse_args(argv)
    benches = [read_bench(p) for p in args.benches]
    ensure_folder(args.out.parent)
    text = page(benches, args.out)
    section = "\n".join(sweep_section([read_sweep(p) for p in args.sweep], args.out))
    text = text.replace("\n## GPU reproduction queue", f"\n{section}\n## GPU reproduction queue", 1)
    text = text.replace("\npython scripts/make_results.py ", "\npython scripts/make_results.py "
                        + "".join(f"--sweep {_rel(p, args.out)} " for p in args.sweep), 1)
    write_text(args.out, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
