r"""Rows of the Peptides-func CPU suite (``peptides-func-cpu-30min``, :mod:`gea_graph.bench.suites`): the cost of a
GEANet branch in a training step, and the peak resident memory of a real training run.

* ``MPNN+GEANet step [Peptides-func, batch 128]``: the median training step (forward, masked BCE loss, backward,
  AdamW step; Lightning's ``on_train_batch_start`` to ``on_train_batch_end``) of the suite's GCN+GEANet recipe
  (``gcn-geanet-peptides-func-cpu``: GEANet branch and LapPE-10 DeepSet) against the suite's GCN recipe
  (``gcn-peptides-func-cpu``), each timed inside real training runs (:func:`gea_graph.train.fit` on the recipe's own
  loader batches of 128 graphs, the same batches in the same order for both), each run a fresh process: the full
  mode alternates :data:`STEP_RUNS` one-epoch runs of each, ``--quick`` trains one run of :data:`QUICK_STEP_RUN`
  steps each; the first :data:`STEP_WARMUP` steps of a run are not counted. Target ≤ 1.4. Timing the two models'
  steps in one process, on one fixed batch, measured the allocator instead: glibc's thresholds, which adapt to what a
  process has freed, had stayed low there, the steps' tensors went back to the system after every step, and every
  step faulted their pages in again, which a training run does not.
* ``Peptides-func training run · peak RSS``: each of the suite's recipes trains in a fresh process
  (``python -m gea_graph train RECIPE trainer.max_epochs=1 [data.subset=S] --threads 1``, as ``gea-graph bench``
  runs it) under :func:`gea_graph.bench.measure.measure`; the row is the largest peak RSS (``VmHWM``) of the three,
  in MiB, target ≤ 3072. The full mode trains a whole epoch (85 steps) and evaluates both splits; ``--quick`` trains
  :data:`QUICK_STEPS` steps on a subset. The datasets are built beforehand, in a process of their own, so the build
  is not in the peak.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor
from torch_geometric.data import Batch

from gea_graph.bench.perf.core import Row, Settings, Target

GEANET_RECIPE = "gcn-geanet-peptides-func-cpu"
MPNN_RECIPE = "gcn-peptides-func-cpu"
SUITE = "peptides-func-cpu-30min"
BATCH = 128
#: Training steps of each run of the peak-RSS row in ``--quick`` mode (the full mode trains one whole epoch).
QUICK_STEPS = 6
#: Training steps of the run of each recipe of the MPNN+GEANet row in ``--quick`` mode (one run each; the full mode
#: trains :data:`STEP_RUNS` runs of one whole epoch, 85 steps, each).
QUICK_STEP_RUN = 40
#: Training runs of each recipe of the MPNN+GEANet row in the full mode (alternated: ours, reference, reference, ours).
STEP_RUNS = 2
#: First steps of each run that the MPNN+GEANet row does not count: the first steps of a run are slower than the
#: later ones (warm-up), and a long run is past them.
STEP_WARMUP = 10


def _training_step(recipe_name: str, batch: Batch, fused: bool = False) -> Callable[[], None]:
    from gea_graph.models import build_model
    from gea_graph.train.metrics import loss_fn, prepare, resolve_task
    from gea_graph.train.module import build_optimizer
    from gea_graph.train.recipe import load_recipe

    recipe = load_recipe(recipe_name)
    torch.manual_seed(0)
    model = build_model(recipe.model).to(batch.x.device).train()  # on the batch's device (CUDA in perf)
    criterion = loss_fn(resolve_task(recipe.model, recipe.trainer.loss, recipe.trainer.metric)[0])
    optimizer = build_optimizer(model.parameters(), recipe.optim, fused)  # as training builds it
    task = recipe.model.task

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        pred, target = prepare(model(batch), batch, task)
        labelled: Tensor = ~torch.isnan(target)
        criterion(pred[labelled], target[labelled]).backward()
        optimizer.step()

    return step


class StepTimes(Callback):
    r"""Wall-clock seconds of every training step of a run, from ``on_train_batch_start`` to ``on_train_batch_end``
    (forward, loss, backward, optimiser step), bracketed by :func:`torch.cuda.synchronize` on a GPU."""

    def __init__(self, cuda: bool = False) -> None:
        self.cuda = cuda
        self.seconds: list[float] = []
        self._start = 0.0

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._start = self._now()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seconds.append(self._now() - self._start)


def timed_training_run(recipe: str, steps: int | None, device: torch.device,
                       overrides: Sequence[str] = ()) -> list[float]:
    r"""Seconds of each training step of one run of ``recipe`` (seed 0, one epoch; ``steps``: on the first ``steps``
    batches of graphs of each split, ``None``: the whole epoch) in a fresh process with this process's torch
    threads (:class:`StepTimes`; the process is ``python -m gea_graph.bench.perf.training``)."""
    from gea_graph.bench.child import child_env

    with tempfile.TemporaryDirectory(prefix="gea-graph-perf-steps-") as out:
        command = [sys.executable, "-m", "gea_graph.bench.perf.training", recipe, str(steps or 0), str(device),
                   str(torch.get_num_threads()), out, *overrides]
        done = subprocess.run(command, check=False, capture_output=True, text=True, env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"timing the training steps of {recipe} failed ({done.returncode}): "
                           f"{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["step_s"]


def geanet_step_rows(settings: Settings, recipes: Sequence[str] | None = None,
                     overrides: Sequence[str] = ()) -> list[Row]:
    r"""``MPNN+GEANet step [Peptides-func, batch 128]``: GCN+GEANet vs GCN, median training step in real training
    runs (see the module doc). ``recipes`` (ours, reference; default :data:`GEANET_RECIPE`, :data:`MPNN_RECIPE`) and
    ``overrides`` (every run's) are for the tests."""
    from gea_graph.train.recipe import load_recipe, resolve_recipe

    recipes = tuple(recipes or (GEANET_RECIPE, MPNN_RECIPE))
    ours_name, reference_name = recipes
    for name in recipes:
        _prepare_data(load_recipe(resolve_recipe(name), list(overrides)))
    steps, runs = (QUICK_STEP_RUN, 1) if settings.quick else (None, STEP_RUNS)
    times: dict[str, list[float]] = {ours_name: [], reference_name: []}
    for i in range(runs):  # ours, reference, reference, ours, ...
        for name in (recipes if i % 2 == 0 else recipes[::-1]):
            times[name] += timed_training_run(name, steps, settings.device, overrides)[STEP_WARMUP:]
    if not all(times.values()):
        raise RuntimeError(f"no training step was timed past the first {STEP_WARMUP} of a run")
    t_ours, t_ref = (statistics.median(times[name]) for name in recipes)
    size = f"{steps} steps" if steps else "one epoch"
    note = (f"{ours_name} vs {reference_name}, median of {len(times[ours_name])} / {len(times[reference_name])} "
            f"training steps on their own loader batches ({runs} run(s) each of {size}, alternated, each a fresh "
            f"process; the first {STEP_WARMUP} steps of a run not counted)")
    return [Row("MPNN+GEANet step [Peptides-func, batch 128]", t_ours * 1e3, t_ref * 1e3, "ms/step",
                Target("<=", 1.4), note)]


def suite_recipes() -> tuple[str, ...]:
    r"""The recipes of the ``peptides-func-cpu-30min`` suite."""
    from gea_graph.bench.suites import get_suite

    return get_suite(SUITE).recipes


def _prepare_data(recipe: Any) -> None:
    r"""Builds the dataset of ``recipe`` (a :class:`~gea_graph.train.recipe.Recipe`) with its positional encodings
    in a process of its own (``gea-graph data prepare``), so that the runs timed or measured after it only read it."""
    from gea_graph.bench.child import child_env, gea_graph_command

    if recipe.data.name is None:
        return
    prepare = gea_graph_command("data", "prepare", recipe.data.name)
    if recipe.data.pe:
        prepare += ["--pe", recipe.data.pe]
    if recipe.data.root:
        prepare += ["--root", str(recipe.data.root)]
    if "depth" in recipe.data.options:
        prepare += ["--depth", str(recipe.data.options["depth"])]
    subprocess.run(prepare, check=True, stdout=subprocess.DEVNULL, env=child_env())


def _run(command: Sequence[str], label: str, out: str) -> int:
    from gea_graph.bench.child import child_env
    from gea_graph.bench.measure import measure

    result = measure(label, command, out, env=child_env())
    if result.exit_status != 0:
        raise RuntimeError(f"{label} exited with {result.exit_status}: {' '.join(command)}")
    return result.peak_rss_bytes


def training_rss_rows(settings: Settings, recipes: Sequence[str] | None = None,
                      overrides: Sequence[str] = ()) -> list[Row]:
    r"""``Peptides-func training run · peak RSS``: the largest peak RSS of a short real training run of each recipe
    (the suite's three by default), each in a fresh process (see the module doc). ``overrides`` go to every run
    (the tests train tiny recipes with them)."""
    from gea_graph.train.recipe import load_recipe, resolve_recipe

    recipes = tuple(recipes or suite_recipes())
    steps = QUICK_STEPS if settings.quick else None
    peaks: dict[str, int] = {}
    from gea_graph.bench.child import gea_graph_command

    python = gea_graph_command()
    with tempfile.TemporaryDirectory(prefix="gea-graph-perf-rss-") as tmp:
        for name in recipes:
            recipe = load_recipe(resolve_recipe(name), list(overrides))
            _prepare_data(recipe)  # built first, in a process of its own: not in the peak
            subset = [f"data.subset={steps * recipe.trainer.batch_size}"] if steps else []
            run_dir = os.path.join(tmp, recipe.name)
            command = [*python, "train", name, "trainer.max_epochs=1", *subset, *overrides, "--out", run_dir,
                       "--no-progress", "--threads", "1", "--accelerator", "cpu"]
            peaks[recipe.name] = _run(command, recipe.name, run_dir)
    mib = {name: peak / 2**20 for name, peak in peaks.items()}
    size = f"{steps} steps" if steps else "one epoch"
    note = f"{size} each, fresh process, 1 thread: " + ", ".join(f"{n} {v:.0f}" for n, v in mib.items())
    return [Row("Peptides-func training run · peak RSS", max(mib.values()), None, "MiB",
                Target("<=", 3072.0, on="ours"), note)]


def train_timed(recipe: str, steps: int | None, out: str, timer: StepTimes, overrides: Sequence[str] = ()) -> None:
    r"""Trains one epoch of ``recipe`` (seed 0; ``steps``: on the first ``steps`` batches of graphs of each split,
    ``None``: the whole epoch) into ``out`` in this process, on a GPU when ``timer.cuda``, with ``timer`` among the
    callbacks."""
    from gea_graph.train import fit
    from gea_graph.train.recipe import load_recipe, resolve_recipe

    path = resolve_recipe(recipe)
    keys = ["trainer.max_epochs=1", *overrides]
    if steps:
        keys.insert(1, f"data.subset={steps * load_recipe(path, list(overrides)).trainer.batch_size}")
    fit(load_recipe(path, keys), out, seed=0, progress=False, callbacks=[timer], verbose=False,
        accelerator="gpu" if timer.cuda else "cpu", devices=1)


def _main(argv: Sequence[str]) -> None:
    r"""The process of :func:`timed_training_run`: ``RECIPE STEPS DEVICE THREADS OUT [OVERRIDES...]`` (``STEPS``
    0: the whole epoch); prints ``{"step_s": [...]}`` as its last line."""
    name, steps, device, threads, out, *overrides = argv
    torch.set_num_threads(int(threads))
    timer = StepTimes(torch.device(device).type == "cuda")
    train_timed(name, int(steps) or None, out, timer, overrides)
    print(json.dumps({"step_s": timer.seconds}))


if __name__ == "__main__":
    _main(sys.argv[1:])
