r"""Attention rows of the performance suite: global attention without padding, on a real Peptides-func batch of
:data:`GRAPHS` training graphs (sizes 8 to ~440 nodes: the padded batch does several times the work the graphs need).

:data:`CHANNELS` channels, :data:`HEADS` heads of 24, as issue 22 measured; forward + backward, the per-batch planning
included in the timed call (the quick mode times :data:`QUICK_REPEATS` calls per side):

* ``packed attention``: the attention core, as issue 22's table measured it: from a leaf ``qkv [sum N, 3, H, D]``
  (what the module's fused projection produces) to the output ``[sum N, H * D]`` before the output projection. Ours
  :meth:`~gea_graph.nn.attention.MultiheadAttention.attend_packed` on the packed rows, the reference the module's
  dense core on the padded batch (``to_dense``, SDPA with the padding mask, ``from_dense``: the layout of PyG's
  ``GPSConv`` and of GraphGPS). Its ``· whole module`` row times the whole module on the node features
  ``x [sum N, C]`` (``impl="packed"`` against the same module on the padded batch): both projections, the same work
  on both sides, included. On CUDA a further row times the whole module in bfloat16 (the ``varlen`` kernel).
* ``size-grouped GFSA``: :class:`~gea_graph.nn.attention.GFSA` on blocks of graphs of similar size
  (``impl="grouped"``) against the same module on the dense padded batch.
* ``attention padding waste``: attention-matrix entries computed per head by the device's default path
  (``impl="auto"`` in float32: packed and grouped on CPU, dense on a GPU), over the :math:`\sum n^2` the graphs need
  (the reference: the dense padded path's :math:`B N_{\max}^2`); for softmax attention and for the attentions that
  run on blocks (GFSA, p-Laplacian, AGF, biased softmax).
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


class _QKV(torch.nn.Module):
    """The input of the attention core rows: a leaf ``qkv [sum N, 3, H, D]``, the fused projection's output."""

    def __init__(self, rows: int, heads: int, head_dim: int, device: torch.device) -> None:
        super().__init__()
        self.qkv = torch.nn.Parameter(torch.randn(rows, 3, heads, head_dim, device=device))


def _packed_core(module, leaf: _QKV, ptr, batch, counts: np.ndarray, largest: int):
    from gea_graph.nn.attention import AttentionPlan

    qkv = leaf.qkv
    out = module.attend_packed(qkv, AttentionPlan(ptr, qkv.size(0), largest, counts, batch=batch))
    return out.reshape(qkv.size(0), -1)


def _dense_core(module, leaf: _QKV, batch, num_graphs: int, largest: int):
    # The module's dense path (DenseAttentionBase.forward) between its two projections.
    from gea_graph.nn.attention import from_dense, key_padding_bias, merge_heads, to_dense

    rows, _, heads, head_dim = leaf.qkv.shape
    dense, mask = to_dense(leaf.qkv.reshape(rows, -1), batch, batch_size=num_graphs, max_num_nodes=largest)
    q, k, v = dense.view(num_graphs, largest, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    out, _ = module.attend(q, k, v, key_padding_bias(mask, q.dtype), False)
    return from_dense(merge_heads(out), mask, rows)


def attention_rows(settings: Settings) -> list[Row]:
    r"""Packed softmax vs dense, size-grouped GFSA vs dense, and the padding waste, on Peptides-func."""
    from gea_graph.nn.attention import GFSA, AttentionPlan, MultiheadAttention

    device = settings.device
    if settings.quick:  # a dense step on this batch takes about a second on one CPU core: fewer repeats
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
    softmax = MultiheadAttention(CHANNELS, HEADS, impl="packed").to(device)
    ours_qkv, dense_qkv = (_QKV(inp.x.size(0), HEADS, CHANNELS // HEADS, device) for _ in range(2))
    with torch.no_grad():
        dense_qkv.qkv.copy_(ours_qkv.qkv)
    rows += layer_rows(f"packed attention {NAME}", ours_qkv,
                       partial(_packed_core, softmax, ours_qkv, *args[1:]), dense_qkv,
                       partial(_dense_core, softmax, dense_qkv, *dense_args[1:]), Target("<=", 0.25), settings,
                       f"{note}; {HEADS} heads of {CHANNELS // HEADS}; the attention core (qkv to the heads' output); "
                       f"reference: to_dense + SDPA with the padding mask + from_dense")
    rows += layer_rows(f"packed attention {NAME} · whole module", softmax, partial(_plan_call, softmax, *args),
                       softmax, partial(_dense_call, softmax, *dense_args), None, settings,
                       f"{note}; {CHANNELS} channels, {HEADS} heads; both projections included")
    if device.type == "cuda":  # the bfloat16 kernel (varlen); not yet run on a GPU when written
        half = MultiheadAttention(CHANNELS, HEADS, impl="packed").to(device, torch.bfloat16)
        x16 = inp.x.to(torch.bfloat16)
        rows += layer_rows(f"packed attention {NAME} · bf16 (varlen)", half,
                           partial(_plan_call, half, x16, *args[1:]), half,
                           partial(_dense_call, half, x16, *dense_args[1:]), Target("<=", 0.25), settings, note)

    torch.manual_seed(0)
    gfsa = GFSA(CHANNELS, HEADS, impl="grouped").to(device)
    rows += layer_rows(f"size-grouped GFSA {NAME}", gfsa, partial(_plan_call, gfsa, *args),
                       gfsa, partial(_dense_call, gfsa, *dense_args), Target("<=", 0.4), settings,
                       f"{note}; grouped vs padded, the grouping planned in the timed call")

    squares = float((counts.astype(np.float64) ** 2).sum())
    padded = inp.num_graphs * largest ** 2 / squares
    plan = AttentionPlan(ptr, inp.x.size(0), largest, counts, batch=inp.batch)
    # the default ("auto") paths of the device, in float32: packed / grouped on CPU, dense on a GPU
    softmax_impl = MultiheadAttention(CHANNELS, HEADS).resolve_impl(plan)
    blocks_impl = GFSA(CHANNELS, HEADS).resolve_impl(plan)
    blocks = plan.layout(blocks_impl == "grouped")
    rows.append(Row(f"attention padding waste {NAME}", plan.work(softmax_impl) / squares, padded, "x sum n^2",
                    Target("<=", 1.2, on="ours"),
                    f"softmax (the GPS/GEAET Transformer branch): {softmax_impl}; reference: dense padded"))
    rows.append(Row(f"attention padding waste {NAME} · grouped (GFSA, p-Laplacian, AGF, with a bias)",
                    blocks.work / squares, padded, "x sum n^2", Target("<=", 1.2, on="ours"),
                    f"{blocks_impl}: {len(blocks.blocks)} blocks of graphs of similar size; reference: dense padded"))
    return rows
