r"""Helpers between PyG's sparse batch layout and the dense ``[B, N, C]`` layout of the global attentions."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch


def to_dense(
    x: Tensor,
    batch: Tensor | None = None,
    batch_size: int | None = None,
    max_num_nodes: int | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Sparse node features ``[sum N_i, C]`` -> ``(x_dense [B, N_max, C], mask [B, N_max] bool)``.

    A thin wrapper of :func:`torch_geometric.utils.to_dense_batch` (padding with zeros, ``mask`` is
    ``True`` on real nodes), so that every global attention in :mod:`gea_graph.nn.attention` can be
    called as ``attn(*to_dense(x, batch))``.

    ``batch`` must be sorted (nodes of graph 0 first, then graph 1, ..., as PyG's ``Batch`` makes
    it): :func:`from_dense` returns the nodes in that order. An unsorted ``batch`` raises a
    :class:`ValueError` (one comparison over the nodes; PyG would silently drop nodes). A batch of
    0 nodes gives ``[B, 0, C]`` (``B = batch_size`` or 0).

    Under :func:`torch.compile` give :obj:`batch_size` and :obj:`max_num_nodes` (the largest graph
    of the batch, or any bound of it): then no size is read from the data, there is no host sync
    and the function traces without graph breaks (the sortedness check, a host sync, is skipped
    while compiling).
    """
    if x.size(0) == 0:
        size = batch_size or 0
        nodes = max_num_nodes or 0
        return (x.new_zeros(size, nodes, *x.shape[1:]),
                torch.zeros(size, nodes, dtype=torch.bool, device=x.device))
    if batch is not None and not torch.compiler.is_compiling():
        check_sorted(batch, "to_dense")
    if batch is not None and batch_size is not None and max_num_nodes is not None:
        return _to_dense_sized(x, batch, batch_size, max_num_nodes)
    return to_dense_batch(x, batch, fill_value=0.0, max_num_nodes=max_num_nodes,
                          batch_size=batch_size)


def _to_dense_sized(x: Tensor, batch: Tensor, batch_size: int, max_num_nodes: int) -> tuple[Tensor, Tensor]:
    # to_dense_batch with both sizes given, written with index_copy: PyG's `out[idx] = x` broadcasts a one-row x,
    # so torch.export / torch.compile guard on the node count being 1 (a one-node batch would need its own graph).
    counts = torch.zeros(batch_size, dtype=torch.long, device=x.device).scatter_add_(
        0, batch, torch.ones_like(batch))
    first = torch.cumsum(counts, 0) - counts  # index of each graph's first node
    slot = batch * max_num_nodes + (torch.arange(x.size(0), device=x.device) - first[batch])
    out = x.new_zeros((batch_size * max_num_nodes, ) + tuple(x.shape[1:])).index_copy(0, slot, x)
    mask = torch.zeros(batch_size * max_num_nodes, dtype=torch.bool, device=x.device).index_fill(0, slot, True)
    return (out.view((batch_size, max_num_nodes) + tuple(x.shape[1:])),
            mask.view(batch_size, max_num_nodes))


def check_sorted(batch: Tensor, who: str) -> None:
    r"""Raises :class:`ValueError` (naming ``who``) unless ``batch`` is sorted (a host sync)."""
    if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError(f"{who}: the batch vector is not sorted (the nodes of each graph must be "
                         "contiguous and graphs in increasing order, as in a PyG Batch); sort the "
                         "nodes by graph first, e.g. with batch.sort(stable=True)")


def from_dense(x_dense: Tensor, mask: Tensor, num_nodes: int | None = None) -> Tensor:
    r"""Inverse of :func:`to_dense`: ``x_dense[mask]`` -> ``[sum N_i, C]`` in PyG node order.

    :obj:`num_nodes` (the number of real nodes, ``x.size(0)`` before :func:`to_dense`) fixes the
    output size, so no host sync is needed and :func:`torch.compile` sees a static-size gather
    (:func:`torch.nonzero_static`) instead of a data-dependent boolean index."""
    if num_nodes is None:
        num_nodes = int(mask.sum())
    # (graph, position) of every real node, row-major = PyG's node order. No reshape: the mask may be a slice (a
    # Graphormer's nodes after its graph token), whose reshape is a view or a copy depending on the batch size being
    # 1, a guard under torch.export.
    index = torch.nonzero_static(mask, size=num_nodes)
    return x_dense[index[:, 0], index[:, 1]]


def key_padding_bias(mask: Tensor, dtype: torch.dtype) -> Tensor:
    r"""Additive key mask ``[B, 1, 1, N]``: ``0`` on real keys, the most negative finite value of
    ``dtype`` on padded keys.

    A finite value instead of ``-inf`` keeps a row whose keys are all padded (an empty slot of the
    batch) finite: its softmax becomes uniform instead of ``NaN``; such rows are zeroed afterwards.
    """
    neg = torch.finfo(dtype).min
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        ~mask, neg)[:, None, None, :]


def split_heads(x: Tensor, heads: int) -> Tensor:
    r"""``[B, N, H*D]`` -> ``[B, H, N, D]``."""
    B, N, C = x.shape
    return x.view(B, N, heads, C // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    r"""``[B, H, N, D]`` -> ``[B, N, H*D]``."""
    B, H, N, D = x.shape
    return x.transpose(1, 2).reshape(B, N, H * D)
