r"""How the global attentions of a model lay out one batch: planned once per batch, shared by every layer.

Attention never crosses graphs, so a batch needs :math:`\sum_i N_i^2` work, not the padded :math:`B N_{\max}^2`
(several times more on Peptides-func). An :class:`AttentionPlan` holds what a layer needs to attend on PyG's packed rows
``x [sum N_i, C]`` (graph ``i`` owns rows ``ptr[i]:ptr[i+1]``):

* :class:`BlockLayout`\ s, shared by every global attention: the graphs are cut into :class:`DenseBlock`\ s of
  graphs of similar size, each padded only to its own largest graph (impl ``"grouped"``: a block closes before its
  padded work :math:`g L^2` would pass ``max_waste`` times the :math:`\sum n^2` of its graphs), or into one block of
  the whole padded batch (impl ``"dense"``, the reference, equal to :func:`~torch_geometric.utils.to_dense_batch`);
* the additive attention bias of each block, built once per batch and dtype (a structural bias such as
  Graphormer's, masked at padded keys once, or the key-padding mask alone; none for a block whose graphs all have
  its size), so no layer copies a bias.

Layouts and biases are built on first use and cached on the plan: the layers of one forward share them.

Host syncs. The grouped layout is planned on the host from the graphs' node counts. Give them
(``node_counts``, e.g. from the CPU ``ptr`` of the batch before it moves to the device, as the training loop does)
and ``max_num_nodes``, and building and using a plan makes no host sync; without them the plan reads them from
``ptr`` (one sync each). Under :func:`torch.compile` the grouped layout (a per-batch Python loop over blocks) is
replaced by the dense one, which traces once for all batches.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .dense import check_sorted

#: The implementations of a global attention (``model.attn_impl`` in a recipe).
ATTN_IMPLS = ("auto", "grouped", "dense")

#: Largest padded work of a block of the grouped layout, relative to the :math:`\sum n^2` of its graphs.
MAX_WASTE = 1.2


def check_impl(impl: str) -> str:
    r"""``impl`` if it is one of :data:`ATTN_IMPLS`, else :class:`ValueError`."""
    if impl not in ATTN_IMPLS:
        raise ValueError(f"attn_impl: {impl!r} is not one of {', '.join(ATTN_IMPLS)}")
    return impl


def plan_groups(counts: Sequence[int] | np.ndarray, max_waste: float = MAX_WASTE) -> list[np.ndarray]:
    r"""Graph indices of each block of the grouped layout, from the node counts (on the host).

    The non-empty graphs are sorted by size (stable); a block takes the next graph while its padded work
    :math:`g\,L^2` (``g`` graphs padded to the largest, ``L``) stays within ``max_waste`` times their
    :math:`\sum n^2`. Empty graphs need no attention and belong to no block."""
    counts = np.asarray(counts, dtype=np.int64)
    order = np.argsort(counts, kind="stable")
    order = order[counts[order] > 0]
    groups: list[np.ndarray] = []
    start, squares = 0, 0
    for pos, graph in enumerate(order):
        n = int(counts[graph])
        if pos > start and (pos - start + 1) * n * n > max_waste * (squares + n * n):
            groups.append(order[start:pos])
            start, squares = pos, 0
        squares += n * n
    if start < len(order):
        groups.append(order[start:])
    return groups


@dataclass(frozen=True)
class DenseBlock:
    r"""Graphs padded to one size: ``num_graphs`` graphs (ids ``graphs`` ``[g]``) of at most ``size`` nodes.
    ``index`` ``[g, L]`` is the packed row of each slot (``0`` at padded slots, which ``mask`` ``[g, L]`` marks
    ``False``; ``padding`` is its complement, made once for the layers); ``uniform``: every graph has ``size``
    nodes (no padding at all)."""

    graphs: Tensor
    index: Tensor
    mask: Tensor
    padding: Tensor
    num_graphs: int
    size: int
    uniform: bool


@dataclass(frozen=True)
class BlockLayout:
    r"""The blocks of one batch. ``inverse`` ``[sum N_i]``: the position of each packed row in the concatenation of
    the blocks' flattened slots; ``graph_base`` / ``graph_size`` ``[B]``: where each graph's ``L x L`` tile starts
    in the concatenation of the blocks' ``[g, L, L]`` tiles (flattened) and its block's ``L`` (``0`` for graphs in
    no block), to scatter per-pair values (an attention bias) straight into the blocks."""

    blocks: tuple[DenseBlock, ...]
    inverse: Tensor
    graph_base: Tensor
    graph_size: Tensor
    grouped: bool

    def gather(self, x: Tensor) -> list[Tensor]:
        r"""Packed rows ``[sum N_i, *F]`` -> per block ``[g, L, *F]``, zero at padded slots."""
        out = []
        for blk in self.blocks:
            dense = x.index_select(0, blk.index.view(-1)).view(blk.num_graphs, blk.size, *x.shape[1:])
            if not blk.uniform:
                dense = dense.masked_fill(blk.padding.view(blk.num_graphs, blk.size, *([1] * (x.dim() - 1))), 0)
            out.append(dense)
        return out

    def scatter(self, blocks: Sequence[Tensor]) -> Tensor:
        r"""Inverse of :meth:`gather`: per block ``[g, L, *F]`` -> packed rows ``[sum N_i, *F]`` (padded slots
        dropped)."""
        flat = [b.reshape(-1, *b.shape[2:]) for b in blocks]
        cat = flat[0] if len(flat) == 1 else torch.cat(flat, 0)
        return cat.index_select(0, self.inverse)

    @property
    def work(self) -> int:
        r"""Attention-matrix entries computed per head: :math:`\sum_{blocks} g L^2`."""
        return sum(b.num_graphs * b.size * b.size for b in self.blocks)


#: A structural bias source: a dense padded tensor ``[B, H, N, N]``, or a builder ``layout -> [g, H, L, L]`` per
#: block (unmasked: the plan masks padded keys once).
BiasSource = Tensor | Callable[[BlockLayout], Sequence[Tensor]]


class AttentionPlan:
    r"""The attention layout of one batch, shared by all layers of a forward (see the module doc).

    Args:
        ptr (torch.Tensor): ``[B + 1]`` long, graph ``i`` owns rows ``ptr[i]:ptr[i+1]``.
        num_nodes (int): Rows of the packed batch (``x.size(0)``).
        max_num_nodes (int, optional): The largest graph's node count, or a bound of it (read from ``ptr`` with a
            host sync when needed and not given).
        node_counts (Sequence[int] or numpy.ndarray, optional): Node count of every graph, on the host (read from
            ``ptr`` with a host sync when the grouped layout is needed and they are not given).
        batch (torch.Tensor, optional): The batch vector ``[sum N_i]``, if at hand (else derived from ``ptr``).
        max_waste (float, optional): The grouped layout's bound of padded work (default :data:`MAX_WASTE`).
    """

    def __init__(self, ptr: Tensor, num_nodes: int, max_num_nodes: int | None = None,
                 node_counts: Sequence[int] | np.ndarray | None = None, batch: Tensor | None = None,
                 max_waste: float = MAX_WASTE) -> None:
        self.ptr = ptr
        self.num_graphs = ptr.numel() - 1
        self.num_nodes = num_nodes
        self._max_num_nodes = max_num_nodes
        self._counts = None if node_counts is None else np.asarray(node_counts, dtype=np.int64)
        if self._counts is not None and self._counts.shape != (self.num_graphs,):
            raise ValueError(f"AttentionPlan: {self._counts.shape[0]} node counts for {self.num_graphs} graphs")
        self._batch = batch
        self.max_waste = float(max_waste)
        self._layouts: dict[bool, BlockLayout] = {}
        self._bias: BiasSource | None = None
        self._biases: dict[tuple[bool, torch.dtype], list[Tensor | None]] = {}

    # -- construction ---------------------------------------------------------------------------------------------
    @classmethod
    def from_batch_vector(cls, batch: Tensor | None, num_nodes: int, num_graphs: int | None = None,
                          max_num_nodes: int | None = None, device: torch.device | None = None,
                          **kwargs) -> AttentionPlan:
        r"""The plan of a sorted batch vector (``None``: one graph of ``num_nodes`` nodes on ``device``).
        ``num_graphs`` is read from it (a host sync) when not given. Without ``max_num_nodes`` (and
        outside :func:`torch.compile`) an unsorted ``batch`` raises :class:`ValueError` (a host
        sync); a caller that gives the sizes vouches for the order, as PyG's ``Batch`` keeps it."""
        if batch is None:
            ptr = torch.tensor([0, num_nodes], dtype=torch.long, device=device)
            return cls(ptr, num_nodes, num_nodes, node_counts=[num_nodes], **kwargs)
        if max_num_nodes is None and not torch.compiler.is_compiling():
            check_sorted(batch, "AttentionPlan")
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if batch.numel() > 0 else 0
        counts = torch.zeros(num_graphs, dtype=torch.long, device=batch.device).index_add_(
            0, batch, torch.ones_like(batch))
        ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        return cls(ptr, num_nodes, max_num_nodes, batch=batch, **kwargs)

    def with_bias(self, bias: BiasSource | None) -> AttentionPlan:
        r"""A plan sharing this one's layouts, with a structural attention bias: a dense padded ``[B, H, N, N]``
        tensor (gathered per block) or a builder ``layout -> [g, H, L, L] per block`` (built per block, never for
        the whole padded batch). Padded keys are masked once per batch, when a layer first asks."""
        plan = AttentionPlan.__new__(AttentionPlan)
        plan.__dict__.update(self.__dict__)
        plan._bias, plan._biases = bias, {}
        return plan

    # -- sizes ----------------------------------------------------------------------------------------------------
    @property
    def has_bias(self) -> bool:
        return self._bias is not None

    @property
    def max_num_nodes(self) -> int:
        if self._max_num_nodes is None:
            self._max_num_nodes = int(self.node_counts.max()) if self.num_graphs > 0 else 0
        return self._max_num_nodes

    @property
    def blocks_by_default(self) -> bool:
        r"""Whether ``impl="auto"`` runs on the grouped layout (on CPU, which pays for every padded entry) rather than
        on the one padded block (on a GPU, which pays per kernel launch rather than per padded entry)."""
        return self.ptr.device.type == "cpu"

    @property
    def node_counts(self) -> np.ndarray:
        r"""Node count of every graph (host; read from ``ptr`` once when not given)."""
        if self._counts is None:
            self._counts = np.asarray((self.ptr[1:] - self.ptr[:-1]).tolist(), dtype=np.int64)
        return self._counts

    @property
    def batch(self) -> Tensor:
        r"""The batch vector (derived from ``ptr`` without a host sync when not given)."""
        if self._batch is None:
            counts = self.ptr[1:] - self.ptr[:-1]
            self._batch = torch.repeat_interleave(torch.arange(self.num_graphs, device=self.ptr.device), counts,
                                                  output_size=self.num_nodes)
        return self._batch

    def work(self, impl: str) -> int:
        r"""Attention-matrix entries per head that ``impl`` computes for this batch: :math:`\sum g L^2` over the
        blocks grouped, :math:`B N_{\max}^2` dense."""
        if impl not in ("grouped", "dense"):
            raise ValueError(f"AttentionPlan.work: impl {impl!r} is not one of grouped, dense")
        return self.layout(impl == "grouped").work

    @property
    def dense_mask(self) -> Tensor:
        r"""``[B, N_max]`` bool, ``True`` on real nodes: the mask of the dense padded layout, the layout of stored
        and returned attention maps (``store_attention``, ``return_attention``)."""
        layout = self.layout(grouped=False)
        if not layout.blocks:
            return torch.zeros(self.num_graphs, 0, dtype=torch.bool, device=self.ptr.device)
        return layout.blocks[0].mask

    # -- layouts --------------------------------------------------------------------------------------------------
    def layout(self, grouped: bool) -> BlockLayout:
        r"""The grouped (``True``) or the dense (``False``) :class:`BlockLayout`, built on first use. Under
        :func:`torch.compile` the dense one is returned for both."""
        grouped = grouped and not torch.compiler.is_compiling()
        if grouped not in self._layouts:
            self._layouts[grouped] = self._grouped() if grouped else self._dense()
        return self._layouts[grouped]

    def _dense(self) -> BlockLayout:
        # One block of every graph in batch order, padded to max_num_nodes: to_dense_batch's layout, on the device.
        B, L, N = self.num_graphs, self.max_num_nodes, self.num_nodes
        device = self.ptr.device
        start, counts = self.ptr[:-1], self.ptr[1:] - self.ptr[:-1]
        graphs = torch.arange(B, device=device)
        if N == 0 or B == 0 or L == 0:
            empty = torch.zeros(0, dtype=torch.long, device=device)
            return BlockLayout((), empty, torch.zeros(B, dtype=torch.long, device=device),
                               torch.zeros(B, dtype=torch.long, device=device), False)
        local = torch.arange(L, device=device)
        mask = local < counts.unsqueeze(1)
        padding = ~mask
        index = (start.unsqueeze(1) + local).masked_fill(padding, 0)
        rows = torch.arange(N, device=device)
        inverse = self.batch * L + rows - start[self.batch]
        block = DenseBlock(graphs, index, mask, padding, B, L, uniform=False)
        return BlockLayout((block, ), inverse, graphs * (L * L), torch.full_like(graphs, L), False)

    def _grouped(self) -> BlockLayout:
        # Planned on the host from the node counts; all index tensors go to the device in one copy.
        counts = self.node_counts
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        groups = plan_groups(counts, self.max_waste)
        B, N = self.num_graphs, self.num_nodes
        inverse = np.zeros(N, dtype=np.int64)
        graph_base = np.zeros(B, dtype=np.int64)
        graph_size = np.zeros(B, dtype=np.int64)
        parts, shapes = [], []
        row_offset = tile_offset = 0
        for graphs in groups:
            sizes = counts[graphs]
            g, L = len(graphs), int(sizes.max())
            local = np.arange(L)
            mask = local[None, :] < sizes[:, None]
            index = np.where(mask, starts[graphs][:, None] + local[None, :], -1)
            slots = row_offset + np.arange(g * L).reshape(g, L)
            inverse[index[mask]] = slots[mask]
            graph_base[graphs] = tile_offset + np.arange(g) * L * L
            graph_size[graphs] = L
            parts += [graphs.astype(np.int64), index.reshape(-1)]
            shapes.append((g, L, bool(mask.all())))
            row_offset += g * L
            tile_offset += g * L * L
        host = np.concatenate(parts + [inverse, graph_base, graph_size]) if parts else \
            np.concatenate([inverse, graph_base, graph_size])
        device_all = torch.from_numpy(host).to(self.ptr.device, non_blocking=True)
        blocks, pos = [], 0
        for g, L, uniform in shapes:
            graphs_t = device_all[pos:pos + g]
            raw = device_all[pos + g:pos + g + g * L].view(g, L)
            pos += g + g * L
            mask_t = raw >= 0
            blocks.append(DenseBlock(graphs_t, raw.clamp(min=0), mask_t, ~mask_t, g, L, uniform))
        inverse_t, base_t, size_t = device_all[pos:].split([N, B, B])
        return BlockLayout(tuple(blocks), inverse_t, base_t, size_t, True)

    # -- biases ---------------------------------------------------------------------------------------------------
    def block_bias(self, layout: BlockLayout, dtype: torch.dtype) -> list[Tensor | None]:
        r"""The additive bias of each block of ``layout`` in ``dtype``: the structural bias (if any) with padded keys
        at the most negative finite value, or the key-padding mask alone ``[g, 1, 1, L]``, or ``None`` for a block
        without padding and without a structural bias. Built once per layout and dtype."""
        key = (layout.grouped, dtype)
        if key not in self._biases:
            neg = torch.finfo(dtype).min
            if self._bias is None:
                biases: list[Tensor | None] = [
                    None if blk.uniform else torch.zeros(blk.mask.shape, dtype=dtype, device=blk.mask.device)
                    .masked_fill_(blk.padding, neg)[:, None, None, :] for blk in layout.blocks]
            else:
                if isinstance(self._bias, Tensor) and not layout.grouped:  # the dense layout is the bias's own
                    raw = [self._bias[:, :, :blk.size, :blk.size] for blk in layout.blocks]
                elif isinstance(self._bias, Tensor):
                    raw = [self._bias[blk.graphs][:, :, :blk.size, :blk.size] for blk in layout.blocks]
                else:
                    raw = list(self._bias(layout))
                biases = [b.to(dtype) if blk.uniform else b.to(dtype).masked_fill(blk.padding[:, None, None, :], neg)
                          for b, blk in zip(raw, layout.blocks)]
            self._biases[key] = biases
        return self._biases[key]

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_graphs={self.num_graphs}, num_nodes={self.num_nodes}, "
                f"bias={self.has_bias})")
