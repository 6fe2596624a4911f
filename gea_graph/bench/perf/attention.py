r"""Attention rows of the performance suite: global attention without padding, on a real Peptides-func batch of
:data:`GRAPHS` training graphs (sizes 8 to ~440 nodes: the padded batch does several times the work the graphs need).

:data:`CHANNELS` channels, :data:`HEADS` heads of 24, as issue 22 measured; forward + backward, the per-batch planning
included in the timed call (the quick mode times :data:`QUICK_REPEATS` calls per side):

* ``size-grouped attention``: :class:`~gea_graph.nn.attention.MultiheadAttention` on blocks of graphs of similar
  size (``impl="grouped"``, what ``impl="auto"`` runs on CPU) against the same module on the dense padded batch
  (``to_dense``, SDPA with the padding mask, ``from_dense``: the layout of PyG's ``GPSConv`` and of GraphGPS), both
  projections included.
* ``size-grouped GFSA``: :class:`~gea_graph.nn.attention.GFSA` on blocks of graphs of similar size
  (``impl="grouped"``) against the same module on the dense padded batch.
* ``attention padding waste``: attention-matrix entries computed per head by the device's default path
  (``impl="auto"``: grouped on CPU, dense on a GPU), over the :math:`\sum n^2` the graphs need (the reference: the
  dense padded path's :math:`B N_{\max}^2`); every global attention runs on that layout.
"""
from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np
import torch

from gea_graph.bench.perf.core import Row, Settings, Target, layer_rows
from gea_graph.bench.perf.data import layer_input

#: Graphs of the batch, width and heads of the attention rows.
GRAPHS = 128
CHANNELS, HEADS = 96, 4
NAME = f"[Peptides-func, batch {GRAPHS}]"
#: Timed calls per side in the quick mode (the full mode keeps the suite's).
QUICK_REPEATS = 10


def _dense_call(module, x, batch, num_graphs: int, largest: int):
    from gea_graph.nn.attention import from_dense, to_dense

    dense, mask = to_dense(x, batch, batch_size=num_graphs, max_num_nodes=largest)
    return from_dense(module(dense, mask), mask, x.size(0))


def _plan_call(module, x, ptr, batch, counts: np.ndarray, largest: int):
    from gea_graph.nn.attention import AttentionPlan

    return module(x, AttentionPlan(ptr, x.size(0), largest, counts, batch=batch))


def attention_rows(settings: Settings) -> list[Row]:
    r"""Size-grouped softmax and GFSA vs dense, and the padding waste, on Peptides-func."""
    from gea_graph.nn.attention import GFSA, AttentionPlan, MultiheadAttention

    device = settings.device
    if settings.quick:  # a dense step on this batch is slow on a CPU: fewer repeats
        settings = dataclasses.replace(settings, repeats=min(settings.repeats, QUICK_REPEATS),
                                       warmup=min(settings.warmup, 1))
    inp = layer_input("Peptides-func", CHANNELS, device, count=GRAPHS)
    counts = torch.bincount(inp.batch.cpu(), minlength=inp.num_graphs).numpy()
    largest = int(counts.max())
    ptr = torch.tensor(np.concatenate([[0], np.cumsum(counts)]), device=device)
    args = (inp.x, ptr, inp.batch, counts, largest)
    dense_args = (inp.x, inp.batch, inp.num_graphs, largest)
    note = f"{inp.num_graphs} graphs, {inp.x.size(0)} nodes, largest {largest}" + (f"; {inp.note}" if inp.note else "")
    rows: list[Row] = []

    torch.manual_seed(0)
    softmax = MultiheadAttention(CHANNELS, HEADS, impl="grouped").to(device)
    rows += layer_rows(f"size-grouped attention {NAME}", softmax, partial(_plan_call, softmax, *args),
                       softmax, partial(_dense_call, softmax, *dense_args), Target("<=", 0.4), settings,
                       f"{note}; {CHANNELS} channels, {HEADS} heads; grouped vs padded, both projections and the "
                       f"grouping included")

    torch.manual_seed(0)
    gfsa = GFSA(CHANNELS, HEADS, impl="grouped").to(device)
    rows += layer_rows(f"size-grouped GFSA {NAME}", gfsa, partial(_plan_call, gfsa, *args),
                       gfsa, partial(_dense_call, gfsa, *dense_args), Target("<=", 0.4), settings,
                       f"{note}; grouped vs padded, the grouping planned in the timed call")

    squares = float((counts.astype(np.float64) ** 2).sum())
    padded = inp.num_graphs * largest ** 2 / squares
    plan = AttentionPlan(ptr, inp.x.size(0), largest, counts, batch=inp.batch)
    # the default ("auto") layout of the device: grouped on CPU, dense on a GPU
    impl = MultiheadAttention(CHANNELS, HEADS).resolve_impl(plan)
    blocks = plan.layout(impl == "grouped")
    rows.append(Row(f"attention padding waste {NAME}", blocks.work / squares, padded, "x sum n^2",
                    Target("<=", 1.2, on="ours"),
                    f"{impl}: {len(blocks.blocks)} blocks of graphs of similar size (every global attention); "
                    f"reference: dense padded"))
    return rows
