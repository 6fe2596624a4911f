"""Wall time and page faults of the two training steps of the perf row ``MPNN+GEANet step [Peptides-func, batch 128]``,
timed the row's old way and its new way.

    GEA_GRAPH_MIRROR=../shared/data python scripts/step_faults.py pair [--steady-heap] [--repeats 8] [--threads 1]
    GEA_GRAPH_MIRROR=../shared/data python scripts/step_faults.py train RECIPE [--steps 60] [--threads 1]

* ``pair``, **one process, one fixed batch** (the row until 2026-11-28): the models of both recipes of the row built
  in this process, one training step each on the same 128 Peptides-func graphs
  (:func:`gea_graph.bench.perf.training.peptides_batch`), alternated ``--repeats`` times after two warm-up steps each;
  with ``--steady-heap``, under :func:`gea_graph.train.memory.steady_heap_thresholds`, as the perf suite runs now.
* ``train RECIPE``, **inside a training run** (the row since): the recipe trains ``--steps`` steps (``data.subset``,
  seed 0, :func:`gea_graph.train.fit`) in this fresh process; the first
  :data:`gea_graph.bench.perf.training.STEP_WARMUP` steps are not counted.

For each recipe it prints the median step (ms) and the median and mean minor page faults per step
(``ru_minflt`` before and after each step). ``THP_MEM_ALLOC_ENABLE=1`` is set before torch is imported, as the
``gea-graph`` command does.
"""
from __future__ import annotations

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before torch is imported, as the gea-graph command does

import argparse
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from gea_graph.bench.perf.training import (
    GEANET_RECIPE,
    MPNN_RECIPE,
    STEP_WARMUP,
    StepTimes,
    _training_step,
    peptides_batch,
    train_timed,
)
from gea_graph.train.memory import steady_heap_thresholds
from gea_graph.train.recipe import load_recipe


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class StepFaults(StepTimes):
    """The row's step times, and the minor page faults of every training step."""

    def __init__(self) -> None:
        super().__init__()
        self.faults: list[int] = []
        self._faults_before = 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._faults_before = _faults()
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self.faults.append(_faults() - self._faults_before)


def _line(way: str, name: str, seconds: list[float], faults: list[int]) -> str:
    return (f"| {way} | {name} | {len(seconds)} | {statistics.median(seconds) * 1e3:.1f} | "
            f"{statistics.median(faults):.0f} | {statistics.mean(faults):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("way", choices=("pair", "train"))
    parser.add_argument("recipe", nargs="?", default=None, help="the recipe of 'train'")
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steady-heap", action="store_true", help="pair: the heap's thresholds as in the perf suite")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.steady_heap:
        steady_heap_thresholds()
    print("| way | recipe | steps | median step (ms) | median faults | mean faults |")
    print("|---|---|---:|---:|---:|---:|")
    if args.way == "train":
        if args.recipe is None:
            parser.error("train needs a RECIPE")
        trace = StepFaults()
        with tempfile.TemporaryDirectory(prefix="step-faults-") as out:
            train_timed(args.recipe, args.steps, out, trace)
        print(_line("inside a training run", args.recipe, trace.seconds[STEP_WARMUP:], trace.faults[STEP_WARMUP:]))
        return

    names = (GEANET_RECIPE, MPNN_RECIPE)
    batch, _ = peptides_batch(load_recipe(GEANET_RECIPE).data.pe)
    steps: dict[str, Callable[[], None]] = {name: _training_step(name, batch) for name in names}
    for step in steps.values():
        step()
        step()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    faults: dict[str, list[int]] = {name: [] for name in names}
    for i in range(args.repeats):
        for name in (names if i % 2 == 0 else names[::-1]):
            start, before = time.perf_counter(), _faults()
            steps[name]()
            seconds[name].append(time.perf_counter() - start)
            faults[name].append(_faults() - before)
    for name in names:
        print(_line("one process, one fixed batch", name, seconds[name], faults[name]))


if __name__ == "__main__":
    main()
