r"""Rows of the performance suite for training at the GPU's limit (issue 47): the fixed-size training step.

On CPU (``gea-graph perf --quick``), what decides a GPU step's speed can be counted exactly:

* ``training step operators [geaet-zinc, batch 32]``: the ATen operators of one eager training step (forward, masked
  loss, backward, optimiser) of the ZINC GEAET recipe on 32 ZINC-sized molecules, as a GPU runs it without capture
  (the padded attention layout, fused AdamW, batches at their own size: ``trainer.fixed_size: auto`` pads only a
  captured step), against PyG's GPS example (``pyg-gps-zinc``: its loss, AdamW with ``foreach``, as on a GPU). On a
  GPU each launched operator costs host time whatever its size. The note gives the count of the fixed-size step
  too, which ``reduce-overhead`` replays as one CUDA graph instead of launching its operators.
* ``host syncs per training step [geaet-zinc, batch 32]``: host-device transfers of the whole step, both directions
  (:func:`gea_graph.train.transfer_census.step_transfers`: forward, loss, backward, clipping, optimiser, schedule),
  ours against the same count of PyG's example; ours must be 0.
* ``compiled graphs per run [geaet-zinc]``: graphs that ``torch.compile(fullgraph=True)`` makes in a fixed-size run of
  2 epochs over a ZINC subset (2 layers, ``aot_eager``), against the number of fixed shapes the run planned.

On CUDA only (skipped rows on CPU, never timed there): ``training throughput [ZINC GEAET recipe vs PyG GPS
example]`` (graphs/s, ``reduce-overhead`` on fixed-size batches against PyG's example in eager mode, same batch
size), ``Peptides-func epoch [gcn-geanet-peptides-func]`` (seconds of the second epoch with ``reduce-overhead``) and
``paper schedule [geaet-zinc, 4 seeds]`` (hours for 2,000 epochs, projected from the measured epochs of 4 runs side
by side on the GPU).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gea_graph.bench.child import child_env
from gea_graph.bench.perf.compiled import zinc_model_batch
from gea_graph.bench.perf.core import Row, Settings, Target
from gea_graph.io import append_to
from gea_graph.models.networks import host_sizes

BATCH = 32


def _zinc_batch(pe: str | None, device: torch.device):
    # 32 ZINC-sized molecules in ZINC's schema with a regression target per graph
    batch = zinc_model_batch(pe, BATCH, torch.device("cpu"))
    batch.y = torch.randn(BATCH, generator=torch.Generator().manual_seed(0))
    batch._slice_dict["y"], batch._inc_dict["y"] = torch.arange(BATCH + 1), torch.zeros(BATCH, dtype=torch.long)
    return batch.to(device)


class _OperatorCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace != "profiler":  # the optimiser's record_function markers are no operators
            self.ops[func.namespace] += 1
        return func(*args, **(kwargs or {}))


def _ours(device: torch.device, fixed: bool):
    # The geaet-zinc step as a GPU run makes it: eager at the batch's own size, or padded to a fixed size as the
    # captured step is; masked loss, fused capturable AdamW.
    from gea_graph.train import fixed_size, load_recipe
    from gea_graph.train.module import GraphTask, build_optimizer, cosine_with_warmup

    # attn_impl dense: the padded attention layout a GPU runs (a CPU would pick the grouped blocks)
    recipe = load_recipe("geaet-zinc", ["model.attn_impl=dense", f"trainer.fixed_size={str(fixed).lower()}"])
    raw = recipe.to_dict()
    torch.manual_seed(0)
    task = GraphTask(raw).to(device).train()
    batch = _zinc_batch(recipe.data.pe, torch.device("cpu"))
    if fixed:
        counts = batch.ptr.diff().numpy()
        edges = batch._slice_dict["edge_index"].diff().numpy()
        shape = fixed_size.plan_shapes(counts, edges, BATCH)[-1]
        batch = fixed_size.pad_batch(batch, shape)
        sizes = {"max_num_nodes": shape.max_nodes}
    else:
        sizes = host_sizes(batch)
    batch = batch.to(device)
    optimizer = build_optimizer(task.parameters(), recipe.optim, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(5, 2000))

    def loss_of() -> torch.Tensor:
        batch.__dict__["_gea_host_sizes"] = sizes  # what the loop reads on the host
        return task.training_step(batch, 0)

    return task, loss_of, optimizer, scheduler, recipe.optim.clip


def _reference(device: torch.device):
    # PyG's examples/graph_gps.py step: its L1 loss, AdamW (foreach, as on a GPU), the same batch size.
    from gea_graph.models import build_model
    from gea_graph.train import load_recipe

    recipe = load_recipe("pyg-gps-zinc")
    torch.manual_seed(0)
    model = build_model(recipe.model).to(device).train()
    batch = _zinc_batch(recipe.data.pe, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.optim.lr, weight_decay=recipe.optim.weight_decay,
                                  foreach=True)

    def loss_of() -> torch.Tensor:
        return (model(batch).squeeze() - batch.y).abs().mean()

    return model, loss_of, optimizer, None, None


def _operators(side) -> int:
    _, loss_of, optimizer, _, _ = side
    for _ in range(2):  # the optimiser's state in place: a steady-state step
        loss_of().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    with _OperatorCount() as count:
        loss_of().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return sum(count.ops.values())


def _transfers(side):
    from gea_graph.train.transfer_census import step_transfers

    module, loss_of, optimizer, scheduler, clip = side
    params = [p for p in module.parameters() if p.requires_grad]
    for _ in range(2):
        step_transfers(loss_of, params, optimizer, clip, scheduler)
    return step_transfers(loss_of, params, optimizer, clip, scheduler)


def step_rows(settings: Settings) -> list[Row]:
    r"""The operator and host-transfer counts of one training step, ours against PyG's GPS example."""
    device = settings.device
    captured, reference = _ours(device, fixed=True), _reference(device)  # each side built once for both rows
    ours_ops, ref_ops = _operators(_ours(device, fixed=False)), _operators(reference)
    captured_ops = _operators(captured)
    rows = [Row(f"training step operators [geaet-zinc, batch {BATCH}]", ours_ops, ref_ops, "operators",
                Target("<=", 1.0), "forward + masked loss + backward + optimiser, eager; fused AdamW; pyg-gps-zinc: "
                f"PyG's example step, AdamW foreach; the fixed-size step, replayed as one CUDA graph: {captured_ops}")]
    ours, ref = _transfers(captured), _transfers(reference)
    way, ref_way = ours.by_direction(), ref.by_direction()
    note = (f"whole step (forward, loss, backward, clip, AdamW, schedule); ours d2h {way['device->host']} h2d "
            f"{way['host->device']}; pyg-gps-zinc d2h {ref_way['device->host']} h2d {ref_way['host->device']}")
    if ours.count:
        note += "; ours: " + ours.report().replace("\n", "; ")[:300]
    rows.append(Row(f"host syncs per training step [geaet-zinc, batch {BATCH}]", ours.count, ref.count, "transfers",
                    Target("<=", 0.0, on="ours"), note))
    return rows


def compiled_graph_rows(settings: Settings) -> list[Row]:
    r"""Graphs compiled (``fullgraph=True``) in a fixed-size run of 2 epochs of a ZINC subset, against its shapes."""
    from torch._dynamo.utils import counters

    from gea_graph.train import fit, load_recipe
    from gea_graph.train.module import GraphTask

    cuda = settings.device.type == "cuda"  # elsewhere aot_eager: the same graphs, no C++ build
    recipe = load_recipe("geaet-zinc", ["data.subset=64", "trainer.max_epochs=2", "trainer.batch_size=32",
                                        "trainer.eval_batch_size=32", "model.layers=2", "trainer.fixed_size=true",
                                        f"trainer.compile={'reduce-overhead' if cuda else 'aot_eager'}",
                                        "trainer.seeds=[0]"])
    tasks: list[GraphTask] = []
    end = GraphTask.on_fit_end
    GraphTask.on_fit_end = lambda self: tasks.append(self)  # type: ignore[method-assign]
    torch.compiler.reset()
    counters.clear()
    try:
        with tempfile.TemporaryDirectory() as out:
            fit(recipe, out, progress=False, verbose=False, accelerator=settings.device.type, devices=1)
    finally:
        GraphTask.on_fit_end = end  # type: ignore[method-assign]
    graphs = counters["stats"]["unique_graphs"]
    breaks = sum(counters["graph_break"].values())
    shapes = len(tasks[0].fixed_shapes()) if tasks else 0
    return [Row("compiled graphs per run [geaet-zinc]", graphs + (float("inf") if breaks else 0), shapes, "graphs",
                Target("<=", 1.0), f"2 epochs of 64 graphs per split, 2 layers, {recipe.trainer.compile}, "
                f"fullgraph=True; {breaks} graph breaks; reference = fixed shapes planned")]


def _skipped(name: str, unit: str, settings: Settings) -> Row:
    return Row(name, None, None, unit, None, f"CUDA only: not run on {settings.device.type}")


def _graphs_per_second(recipe_name: str, compile_mode: str | bool, fixed: bool, steps: int,
                       device: torch.device) -> float:
    # Training steps on ZINC's training split (loader, padding, step, optimiser), timed after a warm-up epoch part.
    from gea_graph.train import fixed_size, load_recipe
    from gea_graph.train.data import load_datasets, make_loader
    from gea_graph.train.module import GraphTask, build_optimizer

    recipe = load_recipe(recipe_name, [f"trainer.fixed_size={str(fixed).lower()}",
                                       f"trainer.compile={str(compile_mode).lower()}"])
    task = GraphTask(recipe.to_dict()).to(device).train()
    optimizer = build_optimizer(task.parameters(), recipe.optim, fused=True) if fixed else \
        torch.optim.AdamW(task.parameters(), lr=recipe.optim.lr, weight_decay=recipe.optim.weight_decay)
    split = load_datasets(recipe.data)["train"]
    loader = make_loader(split, recipe.trainer.batch_size, shuffle_seed=0, pin_memory=True)
    shapes = fixed_size.plan_shapes(*fixed_size.graph_sizes(split), recipe.trainer.batch_size) if fixed else None
    kinds = fixed_size.field_kinds(split.batch(range(min(256, len(split))))) if fixed else None
    graphs, start, done = 0, 0.0, 0
    warm = min(50, steps)
    while done < warm + steps:
        for batch in loader:
            if fixed:
                shape = fixed_size.choose_shape(shapes, batch)
                batch = fixed_size.pad_batch(batch, shape, kinds)
                batch.__dict__["_gea_host_sizes"] = {"max_num_nodes": shape.max_nodes}
            real = batch.num_graphs if not fixed else int(batch.graph_mask.sum())
            batch = batch.to(device, non_blocking=True)
            loss = task.training_step(batch, done) if fixed else (task(batch).squeeze() - batch.y).abs().mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(task.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            if done == warm:
                torch.cuda.synchronize(device)
                start, graphs = time.perf_counter(), 0
            elif done > warm:
                graphs += real
            if done >= warm + steps:
                break
    torch.cuda.synchronize(device)
    return graphs / (time.perf_counter() - start)


def cuda_rows(settings: Settings) -> Iterator[Row]:
    r"""The CUDA-only rows (skipped on other devices), each yielded as soon as it is measured."""
    names = (("training throughput [ZINC GEAET recipe vs PyG GPS example]", "graphs/s"),
             ("Peptides-func epoch [gcn-geanet-peptides-func]", "s/epoch"),
             ("paper schedule [geaet-zinc, 4 seeds]", "h"))
    if settings.device.type != "cuda":
        yield from (_skipped(name, unit, settings) for name, unit in names)
        return
    steps = 100 if settings.quick else 400
    ours = _graphs_per_second("geaet-zinc", "reduce-overhead", True, steps, settings.device)
    ref = _graphs_per_second("pyg-gps-zinc", False, False, steps, settings.device)
    yield Row(names[0][0], ours, ref, "graphs/s", Target(">=", 5.0),
              f"batch 32 both; ours reduce-overhead on fixed-size batches, PyG eager; {steps} steps after 50")
    yield Row(names[1][0], _epoch_seconds("gcn-geanet-peptides-func", 1), None, "s/epoch",
              Target("<=", 0.6, on="ours"), "second epoch, reduce-overhead, fixed-size batches")
    yield Row(names[2][0], _paper_hours(settings), None, "h", Target("<=", 1.5, on="ours"),
              "2,000 epochs x the slowest of 4 runs' measured epoch (after the first), 4 runs side by side")


_EPOCH_SCRIPT = """
import json, sys
from gea_graph.train import fit, load_recipe
recipe = load_recipe(sys.argv[1], ["trainer.max_epochs=" + sys.argv[2], "trainer.compile=reduce-overhead",
                                   "trainer.seeds=[" + sys.argv[3] + "]"])
fit(recipe, sys.argv[4], progress=False, verbose=False, accelerator="cuda", devices=1)
"""


def _epoch_times(recipe: str, epochs: int, seeds: list[int]) -> list[list[float]]:
    # One process per seed, side by side on the GPU; each run's epoch times from its result history.
    with tempfile.TemporaryDirectory() as out:
        logs = [Path(out) / f"{s}.log" for s in seeds]  # files, not pipes: a full pipe would stall its run
        procs = []
        for s, log in zip(seeds, logs):
            with append_to(log) as sink:
                procs.append(subprocess.Popen([sys.executable, "-c", _EPOCH_SCRIPT, recipe, str(epochs), str(s),
                                               f"{out}/{s}"], env=child_env(), stdout=sink, stderr=subprocess.STDOUT))
        for seed, p, log in zip(seeds, procs, logs):
            if p.wait():
                last = (log.read_text().strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"{recipe} seed {seed} ended with exit code {p.returncode}: {last}")
        from gea_graph.train import read_metrics

        times = []
        for s in seeds:
            times.append([row["time"] for row in read_metrics(Path(out) / str(s) / "metrics.csv")])
    return times


def _epoch_seconds(recipe: str, seed: int) -> float:
    times = _epoch_times(recipe, 2, [seed])[0]
    return times[-1] if times else float("nan")


def _paper_hours(settings: Settings) -> float:
    times = _epoch_times("geaet-zinc", 3, [0, 1, 2, 3])
    measured = [float(np.median(t[1:])) for t in times if len(t) > 1]
    return 2000 * max(measured) / 3600 if measured else float("nan")


def gpu_step_rows(settings: Settings) -> Iterator[Row]:
    r"""Every row of this module (the CUDA ones skipped on other devices), each as soon as it is measured."""
    yield from step_rows(settings)
    yield from compiled_graph_rows(settings)
    yield from cuda_rows(settings)


