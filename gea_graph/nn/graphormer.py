r"""Graphormer (Ying et al., 2021) as used by the GFSA paper: encodings, graph token and layer.

A model (:class:`~gea_graph.models.networks.GraphormerModel`) runs on the packed node rows with the
graph token as each graph's first row and the structural bias built per block of graphs of similar
size (:meth:`GraphormerAttnBias.blocks`, never for the whole padded batch), masked once per batch
and shared by all layers::

    x = centrality(atom_encoder(data.x), data.edge_index)
    x, token_rows, node_rows, ptr = graph_token.prepend(x, data.batch, data.ptr)  # one row more per graph
    plan = AttentionPlan(ptr, x.size(0)).with_bias(
        lambda layout: attn_bias.blocks(layout, data, shift=1, extra=graph_token.tile))
    for layer in layers:
        x = layer(x, plan)
    out = final_norm(x)[token_rows]

The dense form, on a PyG batch that carries ``spd_index`` / ``spd`` / ``spd_path``
(see ``docs/design.md``), computes the same function on the padded batch::

    x = atom_encoder(data.x)
    x = centrality(x, data.edge_index)                              # CentralityEncoding
    x, mask = to_dense(x, data.batch)
    bias = attn_bias(data.spd_index, data.spd, data.batch,          # GraphormerAttnBias
                     spd_path=data.spd_path, edge_attr=data.edge_attr,
                     edge_index=data.edge_index, max_num_nodes=x.size(1))
    x, mask, bias = graph_token(x, mask, bias)                      # GraphToken, N -> N + 1
    for layer in layers:                                            # GraphormerLayer
        x = layer(x, mask, bias)
    out = final_norm(x)[:, 0]                                       # token readout (pre-LN: final LN)
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Dropout, Embedding, LayerNorm, Linear, Module, Parameter, Sequential
from torch_geometric.utils import degree

from gea_graph.nn.attention import attention_resolver
from gea_graph.nn.attention.plan import AttentionPlan, BlockLayout

_INIT_STD = 0.02  # Graphormer initialises its embeddings with N(0, 0.02)


def batch_edge_offsets(edge_index: Tensor, batch: Tensor, num_graphs: int | None = None) -> Tensor:
    r"""Position of each graph's first edge in the batched ``edge_index``: ``[num_graphs]`` long.

    Adding ``offsets[g]`` to a graph-local edge id (e.g. from ``spd_path``) gives its batch-global
    id. Assumes PyG's batch layout (the edges of graph ``g`` are contiguous and in graph order)."""
    if num_graphs is None:
        num_graphs = int(batch.max()) + 1 if batch.numel() > 0 else 0
    return _starts(batch[edge_index[0]], num_graphs)


def _starts(index: Tensor, num_groups: int) -> Tensor:
    # Position of each group's first row for a sorted group index: [num_groups]; no host sync.
    counts = index.new_zeros(num_groups).index_add_(0, index, torch.ones_like(index))
    return torch.cumsum(counts, 0) - counts


class CentralityEncoding(Module):
    r"""Centrality encoding of Graphormer (Ying et al., `"Do Transformers Really Perform Bad for
    Graph Representation?" <https://arxiv.org/abs/2106.05234>`_, Eq. 5):

    .. math::
        \mathbf{h}_i = \mathbf{x}_i + \mathbf{z}^-_{\deg^-(v_i)} + \mathbf{z}^+_{\deg^+(v_i)}

    with learnable in- and out-degree embeddings, degrees clamped to :obj:`max_degree`. Degree 0 is
    a real bucket with its own (learned) vector: unlike the DGL/PyG-v1 ports, no
    ``padding_idx`` sits on raw degree 0, so isolated nodes are not silently un-encoded. For
    undirected graphs (both directions stored) in- and out-degree coincide and both tables add up,
    as in the GFSA Graphormer code.

    Args:
        channels (int): Node feature size :math:`C`.
        max_degree (int, optional): Largest degree bucket; larger degrees share it.
            (default: :obj:`64`)

    Shapes:
        - **input:** node features :math:`(\sum N_i, C)`, edge indices :math:`(2, E)`
        - **output:** :math:`(\sum N_i, C)`
    """

    def __init__(self, channels: int, max_degree: int = 64) -> None:
        super().__init__()
        self.channels, self.max_degree = channels, max_degree
        self.in_degree = Embedding(max_degree + 1, channels)
        self.out_degree = Embedding(max_degree + 1, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.normal_(self.in_degree.weight, std=_INIT_STD)
        torch.nn.init.normal_(self.out_degree.weight, std=_INIT_STD)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        N = x.size(0)
        deg_in = degree(edge_index[1], N, dtype=torch.long).clamp_(max=self.max_degree)
        deg_out = degree(edge_index[0], N, dtype=torch.long).clamp_(max=self.max_degree)
        return x + self.in_degree(deg_in) + self.out_degree(deg_out)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, max_degree={self.max_degree})"


def _densify(spd_index: Tensor, batch: Tensor, values: Tensor, batch_size: int | None,
             max_num_nodes: int | None) -> Tensor:
    # [P, H] per ordered pair -> [B, H, N, N]: one index_add, no Python loop over graphs (the
    # scatter of torch_geometric.utils.to_dense_adj, whose size checks sync with the host).
    if batch_size is None:
        batch_size = int(batch.max()) + 1 if batch.numel() > 0 else 0
    start = _starts(batch, batch_size)
    if max_num_nodes is None or not torch.compiler.is_compiling():
        largest = int((torch.cat([start[1:], start.new_full((1, ), batch.numel())]) - start).max()) \
            if batch_size > 0 else 0
        if max_num_nodes is None:
            max_num_nodes = largest
        elif largest > max_num_nodes:
            raise ValueError(f"max_num_nodes={max_num_nodes} is smaller than the largest graph of "
                             f"the batch ({largest} nodes)")
    N = max_num_nodes
    graph = batch[spd_index[0]]
    local = spd_index - start[graph]
    flat = (graph * N + local[0]) * N + local[1]
    dense = values.new_zeros(batch_size * N * N, values.size(-1)).index_add_(0, flat, values)
    # every size named (no -1): torch.export then needs no guard on N or the batch size being 1
    return dense.view(batch_size, N, N, values.size(-1)).permute(0, 3, 1, 2).contiguous()


class SpatialEncoding(Module):
    r"""Spatial encoding of Graphormer (Ying et al., 2021, Eq. 6): a learnable per-head scalar
    :math:`b^{(h)}_{\phi(v_i, v_j)}` indexed by the shortest-path distance, added to the attention
    logits.

    Buckets ``0 .. max_distance`` are hop distances; bucket ``max_distance + 1`` is
    "unreachable" (its own learned value), matching the ``spd`` field of the
    ``ShortestPathDistance`` transform, whose ``max_distance`` must be the same. Values above are
    clamped into the unreachable bucket. Padded pairs get 0 (padded keys are masked by the
    attention itself).

    Args:
        heads (int): Number of attention heads :math:`H`.
        max_distance (int, optional): Largest hop distance with its own bucket.
            (default: :obj:`20`)

    Shapes:
        - **input:** ``spd_index`` :math:`(2, P)`, ``spd`` :math:`(P,)`, ``batch``
          :math:`(\sum N_i,)`
        - **output:** :math:`(B, H, N, N)`
    """

    def __init__(self, heads: int, max_distance: int = 20) -> None:
        super().__init__()
        self.heads, self.max_distance = heads, max_distance
        self.embedding = Embedding(max_distance + 2, heads)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.normal_(self.embedding.weight, std=_INIT_STD)

    def pair_bias(self, spd: Tensor) -> Tensor:
        r"""Per-pair bias ``[P, H]``."""
        return self.embedding(spd.clamp(0, self.max_distance + 1))

    def forward(self, spd_index: Tensor, spd: Tensor, batch: Tensor,
                batch_size: int | None = None, max_num_nodes: int | None = None) -> Tensor:
        return _densify(spd_index, batch, self.pair_bias(spd), batch_size, max_num_nodes)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(heads={self.heads}, max_distance={self.max_distance})"


class EdgeEncoding(Module):
    r"""Edge encoding of Graphormer (Ying et al., 2021, Eq. 7, the ``multi_hop`` variant):

    .. math::
        c^{(h)}_{ij} = \frac{1}{\min(\mathrm{SPD}_{ij}, L)} \sum_{n=1}^{\min(\mathrm{SPD}_{ij}, L)}
            \left(\mathbf{x}_{e_n} \mathbf{W}^E_n\right)_h

    over the edges :math:`e_1, \dots` of one shortest path from :math:`v_i` to :math:`v_j` (the
    ``spd_path`` field, graph-local edge ids, ``-1`` padded), with :math:`\mathbf{x}_{e}\in
    \mathbb{R}^H` the edge-feature embedding and :math:`\mathbf{W}^E_n \in \mathbb{R}^{H\times H}`
    a learnable matrix per hop; paths are cut after :math:`L` = :obj:`max_hops` edges
    (Graphormer's ``multi_hop_max_dist``). The data must keep at least :math:`L` edges per path
    (``spd_path`` of width :math:`L' \geq L`, the PE spec ``spd:D`` keeps :math:`D`, ``spd:D:paths=P``
    keeps :math:`P`); a narrower ``spd_path`` raises :class:`ValueError` naming both values.
    Categorical edge features (``num_edge_types`` given):
    one embedding per column (a shared table with per-column offsets), averaged over columns, as
    Graphormer does; continuous features: a linear map to :math:`H`. Pairs without a path (the
    diagonal, unreachable pairs) get 0.

    Args:
        heads (int): Number of attention heads :math:`H`.
        edge_dim (int): Number of edge-feature columns :math:`F`.
        num_edge_types (int, optional): If set, edge features are long and every column takes
            values in ``[0, num_edge_types)``. (default: :obj:`None` = continuous)
        max_hops (int, optional): :math:`L`. (default: :obj:`5`)

    Shapes:
        - **input:** ``edge_attr`` :math:`(E, F)`, ``edge_index`` :math:`(2, E)`, ``spd_index``
          :math:`(2, P)`, ``spd`` :math:`(P,)`, ``spd_path`` :math:`(P, L')`, ``batch``
        - **output:** :math:`(B, H, N, N)`
    """

    def __init__(self, heads: int, edge_dim: int, num_edge_types: int | None = None,
                 max_hops: int = 5) -> None:
        super().__init__()
        self.heads, self.edge_dim = heads, edge_dim
        self.num_edge_types, self.max_hops = num_edge_types, max_hops
        if num_edge_types is not None:
            self.encoder: Module = Embedding(num_edge_types * edge_dim, heads)
            self.register_buffer("col_offset", torch.arange(edge_dim) * num_edge_types,
                                 persistent=False)
        else:
            self.encoder = Linear(edge_dim, heads)
        self.hop_weight = Parameter(torch.empty(max_hops, heads, heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if isinstance(self.encoder, Embedding):
            torch.nn.init.normal_(self.encoder.weight, std=_INIT_STD)
        else:
            self.encoder.reset_parameters()
        torch.nn.init.normal_(self.hop_weight, std=_INIT_STD)

    def embed_edges(self, edge_attr: Tensor) -> Tensor:
        r"""``[E, F]`` edge features -> ``[E, H]``."""
        if self.num_edge_types is not None:
            if edge_attr.dim() == 1:
                edge_attr = edge_attr.unsqueeze(-1)
            return self.encoder(edge_attr + self.col_offset).mean(1)
        if edge_attr.dim() == 1:
            edge_attr = edge_attr.unsqueeze(-1)
        return self.encoder(edge_attr.to(self.encoder.weight.dtype))

    def pair_bias(self, edge_attr: Tensor, spd: Tensor, spd_path: Tensor, pair_graph: Tensor,
                  edge_offsets: Tensor) -> Tensor:
        r"""Per-pair bias ``[P, H]``; ``pair_graph[p]`` is the graph of pair ``p``."""
        if spd_path.size(1) < self.max_hops:
            # A shorter path in the data would silently drop hops and break min(SPD, L) below.
            raise ValueError(f"EdgeEncoding reads up to max_hops={self.max_hops} edges per shortest path, but "
                             f"the data's 'spd_path' keeps only {spd_path.size(1)} edges; rebuild the data with "
                             f"the PE spec 'spd:D:paths={self.max_hops}' (or more paths) or lower max_hops")
        e = self.embed_edges(edge_attr)
        P, L = spd_path.size(0), self.max_hops
        if L == 0:
            return e.new_zeros(P, self.heads)
        path = spd_path[:, :L]
        valid = path >= 0
        # Row 0 is a zero row that the padding (-1) reads: no branch on whether the batch has edges at all, which
        # torch.export would fix at the traced batch's answer.
        e = torch.cat([e.new_zeros((1, ) + tuple(e.shape[1:])), e])
        gid = (path + 1 + edge_offsets[pair_graph].unsqueeze(-1)).masked_fill(~valid, 0)
        hops = e[gid]  # [P, L, H]
        # sum_n x_{e_n} W_n as one matmul over the (hop, head) axis
        out = hops.reshape(P, L * self.heads) @ self.hop_weight.reshape(L * self.heads, self.heads)
        # min(SPD, L) is the number of path edges read (also past the data's distance cap)
        return out / valid.sum(1, keepdim=True).clamp_(min=1).to(out.dtype)

    def forward(self, edge_attr: Tensor, edge_index: Tensor, spd_index: Tensor, spd: Tensor,
                spd_path: Tensor, batch: Tensor, batch_size: int | None = None,
                max_num_nodes: int | None = None) -> Tensor:
        if batch_size is None:
            batch_size = int(batch.max()) + 1 if batch.numel() > 0 else 0
        offsets = batch_edge_offsets(edge_index, batch, batch_size)
        values = self.pair_bias(edge_attr, spd, spd_path, batch[spd_index[0]], offsets)
        return _densify(spd_index, batch, values, batch_size, max_num_nodes)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(heads={self.heads}, edge_dim={self.edge_dim}, "
                f"num_edge_types={self.num_edge_types}, max_hops={self.max_hops})")


class GraphormerAttnBias(Module):
    r"""Builds Graphormer's dense structural attention bias :math:`b_{\phi(v_i,v_j)} + c_{ij}`
    (Eqs. 6-7) ``[B, H, N, N]`` from a PyG batch carrying ``spd_index`` / ``spd`` (and
    ``spd_path`` + ``edge_attr`` for the edge encoding): the per-pair values of
    :class:`SpatialEncoding` and :class:`EdgeEncoding` are summed and densified by a single
    scatter (no loop over graphs; no host sync given :obj:`batch_size` and
    :obj:`max_num_nodes`, so it compiles without graph breaks). Prepend the graph token
    (and its bias) with :class:`GraphToken` to get ``[B, H, N+1, N+1]``. :meth:`blocks` builds
    the same bias per block of graphs of similar size of an attention plan instead (what the
    model uses: the whole padded ``[B, H, N, N]`` never exists).

    Args:
        heads (int): Number of attention heads :math:`H`.
        max_distance (int, optional): As in :class:`SpatialEncoding`. (default: :obj:`20`)
        edge_dim (int, optional): Edge-feature columns; :obj:`None` disables the edge encoding.
            (default: :obj:`None`)
        num_edge_types (int, optional): As in :class:`EdgeEncoding`. (default: :obj:`None`)
        max_hops (int, optional): As in :class:`EdgeEncoding`. (default: :obj:`5`)
    """

    def __init__(self, heads: int, max_distance: int = 20, edge_dim: int | None = None,
                 num_edge_types: int | None = None, max_hops: int = 5) -> None:
        super().__init__()
        self.heads = heads
        self.spatial = SpatialEncoding(heads, max_distance)
        self.edge = (EdgeEncoding(heads, edge_dim, num_edge_types, max_hops)
                     if edge_dim is not None else None)

    def reset_parameters(self) -> None:
        self.spatial.reset_parameters()
        if self.edge is not None:
            self.edge.reset_parameters()

    def forward(self, spd_index: Tensor, spd: Tensor, batch: Tensor,
                spd_path: Tensor | None = None, edge_attr: Tensor | None = None,
                edge_index: Tensor | None = None, batch_size: int | None = None,
                max_num_nodes: int | None = None) -> Tensor:
        if batch_size is None:
            batch_size = int(batch.max()) + 1 if batch.numel() > 0 else 0
        values = self.pair_values(spd_index, spd, batch, spd_path, edge_attr, edge_index, batch_size)
        return _densify(spd_index, batch, values, batch_size, max_num_nodes)

    def pair_values(self, spd_index: Tensor, spd: Tensor, batch: Tensor, spd_path: Tensor | None = None,
                    edge_attr: Tensor | None = None, edge_index: Tensor | None = None,
                    batch_size: int | None = None) -> Tensor:
        r"""The bias of every stored pair ``[P, H]`` (spatial plus edge encoding)."""
        if batch_size is None:
            batch_size = int(batch.max()) + 1 if batch.numel() > 0 else 0
        values = self.spatial.pair_bias(spd)
        if self.edge is not None:
            if spd_path is None or edge_attr is None or edge_index is None:
                raise ValueError("The edge encoding needs 'spd_path', 'edge_attr' and "
                                 "'edge_index'")
            offsets = batch_edge_offsets(edge_index, batch, batch_size)
            values = values + self.edge.pair_bias(edge_attr, spd, spd_path, batch[spd_index[0]],
                                                   offsets)
        return values

    def blocks(self, layout: BlockLayout, data: Any, shift: int = 0,
               extra: Any = None) -> list[Tensor]:
        r"""The bias of each block of ``layout`` (an :class:`~gea_graph.nn.attention.plan.BlockLayout`
        of the batch ``data``, whose node ``t`` of a graph sits at row ``t + shift`` of its
        tile, e.g. ``shift=1`` after a graph token): ``[g, H, L, L]`` per block, by one scatter
        of the pair values into the blocks' tiles (the bias of the whole padded batch never
        exists). ``extra(L) -> [1, H, L, L]``, if given, is added to each block (the graph
        token's bias). Pairs absent from the data get 0."""
        values = self.pair_values(data.spd_index, data.spd, data.batch, getattr(data, "spd_path", None),
                                  getattr(data, "edge_attr", None), data.edge_index, data.num_graphs)
        graph = data.batch[data.spd_index[0]]
        local = data.spd_index - _starts(data.batch, data.num_graphs)[graph] + shift
        size = layout.graph_size[graph]
        flat = layout.graph_base[graph] + local[0] * size + local[1]
        tiles = values.new_zeros(layout.work, self.heads).index_add_(0, flat, values)
        out, start = [], 0
        for blk in layout.blocks:
            g, L = blk.num_graphs, blk.size
            tile = tiles[start:start + g * L * L].view(g, L, L, self.heads).permute(0, 3, 1, 2)
            out.append(tile if extra is None else tile + extra(L).to(tile.dtype))
            start += g * L * L
        return out

    def forward_data(self, data: Any, max_num_nodes: int | None = None) -> Tensor:
        r"""Convenience: the same from a PyG ``Batch`` (reads ``spd_index``, ``spd``, ``batch``
        and, with the edge encoding, ``spd_path``, ``edge_attr``, ``edge_index``)."""
        return self(data.spd_index, data.spd, data.batch, getattr(data, "spd_path", None),
                    getattr(data, "edge_attr", None), data.edge_index, data.num_graphs,
                    max_num_nodes)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.spatial}, {self.edge})"


class GraphToken(Module):
    r"""Graphormer's virtual graph token ("[VNode]", Ying et al., 2021, §3.1.3): a learned vector
    prepended to every graph (position 0, used for the graph readout), with its own learned
    per-head distance bias :math:`b^{(h)}_{\phi(v_{token}, \cdot)}` added to the token's row and
    to the node-to-token column (as in Graphormer's ``graph_token_virtual_distance``).

    Args:
        channels (int): Node feature size :math:`C`.
        heads (int): Number of attention heads :math:`H`.

    Shapes:
        - **input:** ``x`` :math:`(B, N, C)`, ``mask`` :math:`(B, N)`, optional ``attn_bias``
          :math:`(B, H, N, N)`
        - **output:** ``x`` :math:`(B, N+1, C)`, ``mask`` :math:`(B, N+1)`, ``attn_bias``
          :math:`(B, H, N+1, N+1)`

    The packed form (:meth:`prepend`, :meth:`tile`) does the same on the packed node rows, the
    token bias added per block by :meth:`GraphormerAttnBias.blocks`.
    """

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__()
        self.channels, self.heads = channels, heads
        self.token = Parameter(torch.empty(channels))
        self.distance = Parameter(torch.empty(heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.normal_(self.token, std=_INIT_STD)
        torch.nn.init.normal_(self.distance, std=_INIT_STD)

    def tile(self, size: int) -> Tensor:
        r"""The token's bias on a graph of ``size`` rows, the token first: ``[1, H, L, L]``, the
        per-head distance on row 0 (token -> all) and on column 0 of the other rows
        (node -> token), 0 elsewhere."""
        # Compared, not written into by slices: inductor (torch 2.13) cannot lower a slice assignment of a
        # data-dependent size (tests/train/test_compile_training.py)
        index = torch.arange(size, device=self.distance.device)
        pattern = ((index == 0).unsqueeze(1) | (index == 0).unsqueeze(0)).to(self.distance.dtype)
        return self.distance.view(1, -1, 1, 1) * pattern

    def prepend(self, x: Tensor, batch: Tensor, ptr: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        r"""The packed form: node rows ``x [sum N_i, C]`` of a batch (``batch``, ``ptr``) -> rows
        ``[sum N_i + B, C]`` with the token before each graph's nodes, the token rows ``[B]``, the
        node rows ``[sum N_i]`` (where each input row went) and the new ``ptr`` ``[B + 1]``. No
        host sync."""
        B, (N, C) = ptr.numel() - 1, x.shape
        shifted = ptr + torch.arange(B + 1, device=ptr.device)
        token_rows = shifted[:-1]
        node_rows = torch.arange(N, device=x.device) + batch + 1
        out = x.new_zeros(N + B, C).index_copy(0, node_rows, x)
        out = out.index_copy(0, token_rows, self.token.to(x.dtype).expand(B, C))
        return out, token_rows, node_rows, shifted

    def forward(self, x: Tensor, mask: Tensor, attn_bias: Tensor | None = None
                ) -> tuple[Tensor, Tensor, Tensor]:
        B, N, C = x.shape
        x = torch.cat([self.token.to(x.dtype).expand(B, 1, C), x], dim=1)
        mask = torch.cat([mask.new_ones(B, 1), mask], dim=1)
        token_bias = self.tile(N + 1)
        if attn_bias is None:
            return x, mask, token_bias.expand(B, -1, -1, -1)
        return x, mask, F.pad(attn_bias, (1, 0, 1, 0)) + token_bias.to(attn_bias.dtype)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, heads={self.heads})"


class GraphormerLayer(Module):
    r"""A Graphormer encoder layer (Ying et al., 2021, Eqs. 8-9), pre-LN by default as in
    Graphormer v1, the version the GFSA paper's ZINC code uses:

    .. math::
        \mathbf{h}' = \mathbf{h} + \mathrm{Drop}(\mathrm{Attn}(\mathrm{LN}(\mathbf{h}),
            \mathbf{B})), \qquad
        \mathbf{h}'' = \mathbf{h}' + \mathrm{Drop}(\mathrm{FFN}(\mathrm{LN}(\mathbf{h}')))

    with :math:`\mathrm{FFN} = \mathrm{Linear}\circ\mathrm{Drop}_{act}\circ\mathrm{GELU}\circ
    \mathrm{Linear}` (:obj:`activation_dropout`, fairseq's ``act_dropout``: 0.1 in Graphormer v2's
    recipes, absent from v1). A pre-LN stack needs a final :class:`~torch.nn.LayerNorm` after the
    last layer (the model's job). ``pre_norm=False`` gives the post-LN form of Graphormer v2
    (``LN(h + Drop(Attn(h)))``, then ``LN(h' + Drop(FFN(h')))``), which instead normalises the
    embeddings before the first layer. :obj:`attn` picks the global attention: ``"softmax"`` (plain
    Graphormer), ``"gfsa"`` (Graphormer + GFSA, Choi et al. 2023), ``"plaplacian"`` or ``"agf"``;
    AGF cannot take the structural bias, so pass ``attn_bias=None`` with it.

    Args:
        channels (int): Hidden size :math:`C`.
        heads (int): Number of heads :math:`H`.
        attn (str, optional): Global attention name. (default: :obj:`"softmax"`)
        ffn_channels (int, optional): FFN hidden size. (default: :obj:`channels`, as
            GraphormerSLIM)
        dropout (float, optional): Dropout on the attention and FFN outputs. (default: :obj:`0.0`)
        attn_dropout (float, optional): Attention dropout. (default: :obj:`0.0`)
        activation_dropout (float, optional): Dropout after the FFN's GELU. (default: :obj:`0.0`)
        pre_norm (bool, optional): Pre-LN (v1) or post-LN (v2). (default: :obj:`True`)
        attn_kwargs (dict, optional): Extra arguments of the attention (e.g. ``K`` for GFSA).
        attn_impl (str, optional): How the attention runs on a plan: ``"grouped"`` (blocks of
            graphs of similar size), ``"dense"`` (the padded batch) or ``"auto"`` (grouped on CPU, dense on
            a GPU). (default: :obj:`"auto"`)

    Shapes:
        - **input:** :math:`(B, N, C)`, mask :math:`(B, N)`, optional bias :math:`(B, H, N, N)`;
          or packed :math:`(\sum N_i, C)` and an attention plan (bias inside)
        - **output:** :math:`(B, N, C)`, padded rows zero; or :math:`(\sum N_i, C)`.
    """

    def __init__(self, channels: int, heads: int, attn: str = "softmax",
                 ffn_channels: int | None = None, dropout: float = 0.0,
                 attn_dropout: float = 0.0, pre_norm: bool = True,
                 attn_kwargs: dict[str, Any] | None = None, activation_dropout: float = 0.0,
                 attn_impl: str = "auto") -> None:
        super().__init__()
        self.channels, self.heads, self.attn_type = channels, heads, attn
        self.ffn_channels = ffn_channels or channels
        self.pre_norm = pre_norm
        self.activation_dropout = float(activation_dropout)
        self.attn = attention_resolver(attn, channels, heads, dropout=attn_dropout, impl=attn_impl,
                                       **(attn_kwargs or {}))
        self.norm1 = LayerNorm(channels)
        self.norm2 = LayerNorm(channels)
        # GELU and its dropout share index 1, so the two Linears keep their state-dict keys (ffn.0, ffn.2)
        self.ffn = Sequential(Linear(channels, self.ffn_channels),
                              Sequential(torch.nn.GELU(), Dropout(self.activation_dropout)),
                              Linear(self.ffn_channels, channels))
        self.dropout = Dropout(dropout)

    def reset_parameters(self) -> None:
        self.attn.reset_parameters()
        self.norm1.reset_parameters()
        self.norm2.reset_parameters()
        for m in self.ffn:
            if isinstance(m, Linear):
                m.reset_parameters()

    def aux_loss(self) -> Tensor:
        r"""The attention's auxiliary loss (AGF's weighted orthogonality term), else 0."""
        fn = getattr(self.attn, "aux_loss", None)
        return fn() if fn is not None else self.norm1.weight.new_zeros(())

    def forward(self, x: Tensor, mask: Tensor | AttentionPlan, attn_bias: Tensor | None = None) -> Tensor:
        r"""Dense ``(x [B, N, C], mask [B, N], attn_bias)`` (padded rows zero) or packed
        ``(x [sum N_i, C], plan)`` (the bias in the plan), as the attention takes them."""
        if self.pre_norm:
            x = x + self.dropout(self.attn(self.norm1(x), mask, attn_bias))
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout(self.attn(x, mask, attn_bias)))
            x = self.norm2(x + self.dropout(self.ffn(x)))
        if isinstance(mask, AttentionPlan):
            return x
        return x.masked_fill(~mask.unsqueeze(-1), 0.0)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"attn={self.attn_type}, ffn_channels={self.ffn_channels}, "
                f"pre_norm={self.pre_norm}, activation_dropout={self.activation_dropout})")
