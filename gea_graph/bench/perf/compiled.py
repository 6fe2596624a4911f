r"""Compiled-vs-eager rows of the performance suite: one training step (forward + backward) of the GEAET layer and of
the ZINC GEAET model under :func:`torch.compile` (``fullgraph=True, dynamic=True``, given the batch's largest graph
size) against the same module in eager mode, on the same inputs; and a whole training step of that model (loss,
backward, gradient clipping, AdamW) over a stream of batches of different sizes, as training runs it. A ratio below
1 means compiling pays; the first (compiling) calls fall in the warm-up. Every timed region is bracketed by
``torch.cuda.synchronize`` on a GPU (:func:`~gea_graph.bench.perf.core.timed`,
:class:`~gea_graph.bench.perf.throughput.StepTimer`)."""
from __future__ import annotations

import copy
from functools import partial

import torch
from torch.nn import Module
from torch_geometric.data import Batch

from gea_graph.bench.perf.core import Row, Settings, Target, layer_rows
from gea_graph.bench.perf.data import layer_input, random_graphs
from gea_graph.bench.perf.layers import CHANNELS, HEADS

#: The model row's recipe and its random-walk PE.
MODEL_RECIPE = "geaet-zinc-cpu"


def _compiled(module: Module, settings: Settings) -> Module:
    return torch.compile(copy.deepcopy(module), fullgraph=True, dynamic=True,
                         backend=settings.compile_backend)


def _largest_graph(batch: torch.Tensor, num_graphs: int) -> int:
    return int(torch.bincount(batch, minlength=num_graphs).max())


def zinc_model_batch(pe: str, count: int, device: torch.device) -> Batch:
    r"""``count`` random ZINC-sized molecules in the ZINC schema (one atom-type and one bond-type column) with the
    recipe's PE, collated."""
    from gea_graph.transforms import parse_pe

    transform = parse_pe(pe)
    graphs = []
    for g in random_graphs("ZINC", count):
        g.x, g.edge_attr = g.x[:, :1], g.edge_attr[:, :1]
        graphs.append(transform(g) if transform is not None else g)
    return Batch.from_data_list(graphs).to(device)


def compile_rows(settings: Settings) -> list[Row]:
    r"""The GEAET layer (GatedGCN + softmax attention + GEA) and the ZINC GEAET model, compiled vs eager."""
    from gea_graph.models import build_model
    from gea_graph.nn import GEAETLayer
    from gea_graph.train.recipe import load_recipe

    # Compilations made earlier in this process (of the same model code) count against dynamo's recompile limit,
    # and the rows would time a cache they did not build: start from none.
    torch.compiler.reset()
    device = settings.device
    rows: list[Row] = []
    inp = layer_input("ZINC", CHANNELS, device)
    n_max = _largest_graph(inp.batch, inp.num_graphs)
    torch.manual_seed(0)
    eager = GEAETLayer(CHANNELS, heads=HEADS).to(device)
    compiled = _compiled(eager, settings)
    args = (inp.x, inp.edge_index, inp.edge_attr, inp.batch)
    sizes = {"num_graphs": inp.num_graphs, "max_num_nodes": n_max}
    note = f"{inp.num_graphs} graphs, {inp.x.size(0)} nodes; backend {settings.compile_backend!r}"
    rows += layer_rows("GEAET layer compiled vs eager [ZINC]", compiled, partial(compiled, *args, **sizes),
                       eager, partial(eager, *args, **sizes), Target("<=", 1.0), settings, note)

    recipe = load_recipe(MODEL_RECIPE)
    torch.manual_seed(0)
    model = build_model(recipe.model).to(device)
    batch = zinc_model_batch(recipe.data.pe, 32 if settings.quick else 128, device)
    n_max = _largest_graph(batch.batch, batch.num_graphs)
    compiled_model = _compiled(model, settings)
    note = (f"{MODEL_RECIPE}, {batch.num_graphs} random ZINC-sized graphs, {batch.num_nodes} nodes; "
            f"backend {settings.compile_backend!r}")
    rows += layer_rows("ZINC GEAET model compiled vs eager", compiled_model,
                       partial(compiled_model, batch, max_num_nodes=n_max), model,
                       partial(model, batch, max_num_nodes=n_max), Target("<=", 1.0), settings, note)
    rows.append(training_step_row(model, compiled_model, recipe, settings))
    return rows


#: The largest ZINC molecule has 38 heavy atoms: one bound for every batch sizes the dense attention without a
#: host sync and without a recompile per batch.
ZINC_MAX_NODES = 38


def training_step_row(model: Module, compiled_model: Module, recipe, settings: Settings) -> Row:
    r"""Milliseconds per training step (the L1 loss, backward, clipping at the recipe's norm, AdamW) of the compiled
    model vs the eager one, over the same stream of random ZINC-sized batches (``settings.step_batches`` graphs
    each, a last one of a single graph), alternating blocks of steps; warm-up: every batch once (the
    compilations)."""
    from gea_graph.bench.perf.throughput import StepTimer
    from gea_graph.train.module import build_optimizer

    device = settings.device
    sizes = settings.step_batches
    stream = []
    for i, count in enumerate(sizes):
        batch = zinc_model_batch(recipe.data.pe, count, device)
        batch.y = torch.randn(count, 1, generator=torch.Generator().manual_seed(i)).to(device)
        stream.append(batch)

    def loss(m: Module, batch: Batch) -> torch.Tensor:
        return torch.nn.functional.l1_loss(m(batch, max_num_nodes=ZINC_MAX_NODES), batch.y)

    opt = recipe.optim
    timers = [StepTimer(m, loss, build_optimizer(m.parameters(), opt), stream, device, opt.clip)
              for m in (compiled_model, model)]
    for timer in timers:
        timer.run(len(stream), timed=False)
    steps = max(settings.train_steps, len(stream))
    block = len(stream)
    done = 0
    while done < steps:
        for timer in timers:
            timer.run(block)
        done += block
    ours, reference = (timer.seconds / done * 1e3 for timer in timers)
    note = (f"{MODEL_RECIPE}, {done} steps over batches of {', '.join(map(str, sizes))} random ZINC-sized graphs "
            f"(max_num_nodes={ZINC_MAX_NODES}); backend {settings.compile_backend!r}")
    return Row("ZINC GEAET training step compiled vs eager", ours, reference, "ms/step", Target("<=", 1.0), note)
