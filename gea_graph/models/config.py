r"""Typed configuration of a whole network (the ``model:`` section of a recipe).

Everything a model needs to be built is here, so a model can be built (and its parameters counted) without any data:
input sizes, task and output size are part of the config, not read from a dataset.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("geaet", "graphormer", "mpnn", "pyg_gps", "pyg_gine")
TASKS = ("graph_regression", "graph_classification", "graph_multilabel", "node_classification",
         "target_node", "link_ranking")
NODE_ENCODERS = ("atom", "embedding", "linear", "voc", "coco")
EDGE_ENCODERS = ("bond", "embedding", "linear", "voc", "coco", "none")


@dataclass
class PEConfig:
    r"""Positional encoding read from the batch and encoded into the node features.

    Args:
        kind: ``"lap"`` (reads ``lap_eigvec`` / ``lap_eigval`` / ``lap_mask``) or ``"rw"`` (reads ``rw_pe``).
        size: ``k`` eigenpairs for LapPE, walk length ``L`` for RWPE (must match the data's ``pe`` spec).
        dim: Channels the PE takes in the node embedding (concatenated: the node encoder gets ``hidden - dim``).
        encoder: ``"linear"`` or ``"deepset"`` (LapPE only).
        layers: Layers of the DeepSet encoder.
    """

    kind: str
    size: int
    dim: int
    encoder: str = "linear"
    layers: int = 2


@dataclass
class GraphormerConfig:
    r"""Graphormer-specific settings (``family: graphormer``).

    Args:
        max_degree: Largest degree bucket of the centrality encoding.
        max_distance: Largest shortest-path distance bucket (must match the data's ``spd:N`` spec).
        max_hops: Edges of a shortest path read by the edge encoding (``0`` disables the edge encoding); the data
            must keep at least as many (``spd:N`` keeps ``N``, ``spd:N:paths=P`` keeps ``P``).
        ffn_channels: FFN width (``None``: ``hidden``).
        pre_norm: Pre-LN with a final LayerNorm (Graphormer v1) or post-LN with an embedding LayerNorm (v2).
        gfsa_k: ``K`` of GFSA when ``attn: gfsa``.
    """

    max_degree: int = 64
    max_distance: int = 20
    max_hops: int = 5
    ffn_channels: int | None = None
    pre_norm: bool = True
    gfsa_k: int = 2


@dataclass
class ModelConfig:
    r"""A whole network.

    Args:
        family: ``"geaet"`` (MPNN / global attention / GEANet branches in parallel, any one switched off),
            ``"graphormer"``, ``"mpnn"`` (a plain message-passing stack), or a peer built from PyG's own classes
            (:mod:`gea_graph.models.pyg_peers`): ``"pyg_gps"`` (PyG's ``examples/graph_gps.py`` network: ``mpnn:
            gine``, ``attn: softmax``, ``gea: false``, RWPE only) or ``"pyg_gine"`` (a plain GINE network of the same
            size: ``mpnn: gine``, ``attn: null``, ``gea: false``).
        task: One of :data:`TASKS`.
        out_channels: Outputs per prediction (targets, classes or labels; link ranking: the pair-embedding size).
        hidden: Hidden size :math:`d`.
        layers: Number of layers.
        node_encoder: ``"atom"`` (OGB ``AtomEncoder`` on ``x [N, 9] long``), ``"embedding"`` (one table per column of
            a long ``x``, summed; ``node_vocab`` rows), ``"linear"`` (float ``x [N, node_in]``), or ``"voc"`` /
            ``"coco"`` (the LRGB superpixel encoders: a linear map of the 14 columns standardised with the published
            fixed per-column mean and std of PascalVOC-SP / COCO-SP).
        node_in: Input feature columns of ``x`` (``embedding`` and ``linear``).
        node_vocab: Rows of each embedding table (``embedding``).
        edge_encoder: ``"bond"`` (OGB ``BondEncoder``), ``"embedding"``, ``"linear"``, ``"voc"`` / ``"coco"`` (2
            superpixel edge columns, standardised as the node ones) or ``"none"`` (no edge features: a single learned
            edge vector is used where the layer needs edges).
        edge_in: Edge feature columns (``embedding`` and ``linear``).
        edge_vocab: Rows of each edge embedding table (``embedding``).
        mpnn: MPNN branch (``gatedgcn``, ``gcn``, ``gin``, ``gine``) or ``None``.
        attn: Global attention (``softmax``, ``gfsa``, ``plaplacian``, ``agf``) or ``None``.
        gea: GEANet branch on/off (``geaet``).
        heads: Global attention heads.
        gea_heads: GEANet heads.
        units: GEANet units :math:`S` (``None``: :math:`d / H`).
        edge_units, shared_unit, norm_scope: GEANet options.
        ffn: Feed-forward block after the branch sum (``geaet``; the ``mpnn`` family has none).
        norm: Normalisation name (``batch_norm``, ``layer_norm``, ...).
        act: Activation name.
        local_out_act: Activation on the MPNN output before its residual in a GEAET layer (the authors'
            ``gt.local_out_act``, GEAET Peptides configs); the ``mpnn`` family always applies it (LRGB/GraphGPS
            baselines: conv, activation, dropout, residual, norm).
        dropout: Dropout of the branches and the FFN.
        attn_dropout: Attention dropout.
        attn_impl: How the global attention runs (the same function each way): ``"auto"`` (on CPU blocks of graphs
            of similar size, on a GPU the padded batch), ``"grouped"`` (the blocks), or ``"dense"`` (the padded
            batch: the reference, for comparison).
        pe: Positional encoding, or ``None``.
        pooling: ``"mean"`` or ``"add"`` (graph tasks of the message-passing families).
        head_layers: Linear layers of the prediction head (``1`` = a single linear map).
        head_dropout: Dropout between head layers.
        aux_weight: Multiplier of the mean over layers of the layers' auxiliary losses (AGF's orthogonality term,
            already weighted by the attention's :math:`\gamma` = ``ortho_weight``, 1e-2 by default): ``1`` is the
            AGF code's ``task + mean_layers(gamma * L_ortho)``, ``0`` switches the term off.
        graphormer: Graphormer settings.
        layer_args: Further arguments of each layer (:class:`~gea_graph.nn.GEAETLayer` or
            :class:`~gea_graph.nn.GraphormerLayer`), e.g. ``{local_dropout: 0.1, external_dropout: 0.05}``.
        mpnn_args: Further arguments of the MPNN branch (e.g. :class:`~gea_graph.nn.GatedGCNLayer`).
        attn_args: Further arguments of the global attention (e.g. :class:`~gea_graph.nn.GFSA`).
        gea_args: Further arguments of :class:`~gea_graph.nn.GEANet` /
            :class:`~gea_graph.nn.ExternalAttention`, e.g. ``{eps: null, edge_head_split: strided}``.
        pe_args: Further arguments of the PE encoder (e.g. :class:`~gea_graph.nn.LapPEEncoder`'s
            ``sign_scope``).

    The five ``*_args`` sections pass constructor arguments through unchanged; each key is checked against the
    class's signature here, and a key that a field above already sets is an error
    (:mod:`gea_graph.models.layer_args`).
    """

    family: str
    task: str
    out_channels: int
    hidden: int
    layers: int
    node_encoder: str = "atom"
    node_in: int = 9
    node_vocab: int = 0
    edge_encoder: str = "bond"
    edge_in: int = 3
    edge_vocab: int = 0
    mpnn: str | None = "gatedgcn"
    attn: str | None = "softmax"
    gea: bool = True
    heads: int = 4
    gea_heads: int = 4
    units: int | None = None
    edge_units: bool = False
    shared_unit: bool = False
    norm_scope: str = "graph"
    ffn: bool = True
    norm: str = "batch_norm"
    act: str = "relu"
    local_out_act: bool = False
    dropout: float = 0.0
    attn_dropout: float = 0.0
    attn_impl: str = "auto"
    pe: PEConfig | None = None
    pooling: str = "mean"
    head_layers: int = 2
    head_dropout: float = 0.0
    aux_weight: float = 1.0
    graphormer: GraphormerConfig = field(default_factory=GraphormerConfig)
    layer_args: dict[str, Any] = field(default_factory=dict)
    mpnn_args: dict[str, Any] = field(default_factory=dict)
    attn_args: dict[str, Any] = field(default_factory=dict)
    gea_args: dict[str, Any] = field(default_factory=dict)
    pe_args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = (("family", self.family, FAMILIES), ("task", self.task, TASKS),
                  ("node_encoder", self.node_encoder, NODE_ENCODERS),
                  ("edge_encoder", self.edge_encoder, EDGE_ENCODERS), ("pooling", self.pooling, ("mean", "add")))
        for name, value, allowed in checks:
            if value not in allowed:
                raise ValueError(f"model.{name}: {value!r} is not one of {', '.join(allowed)}")
        if self.pe is not None and self.pe.dim >= self.hidden:
            raise ValueError(f"model.pe.dim ({self.pe.dim}) must be smaller than model.hidden ({self.hidden})")
        if self.family == "mpnn" and self.mpnn is None:
            raise ValueError("model.mpnn: the mpnn family needs an MPNN type")
        if self.family == "geaet" and self.mpnn is None and self.attn is None and not self.gea:
            raise ValueError("model: a geaet layer needs at least one of mpnn, attn, gea")
        if self.family == "graphormer" and self.attn is None:
            raise ValueError("model.attn: the graphormer family needs an attention type")
        from gea_graph.nn.attention.plan import ATTN_IMPLS
        if self.attn_impl not in ATTN_IMPLS:
            raise ValueError(f"model.attn_impl: {self.attn_impl!r} is not one of {', '.join(ATTN_IMPLS)}")
        if self.family.startswith("pyg_"):
            self._check_pyg_peer()
            return
        from gea_graph.models.layer_args import check_layer_args  # imports gea_graph.nn
        check_layer_args(self)

    def _check_pyg_peer(self) -> None:
        # The peers build PyG's classes as they are: only the choices those classes offer are accepted.
        attn = "softmax" if self.family == "pyg_gps" else None
        if self.mpnn != "gine":
            raise ValueError(f"model.mpnn: {self.mpnn!r}; the {self.family} family uses PyG's GINEConv (mpnn: gine)")
        if self.attn != attn:
            raise ValueError(f"model.attn: {self.attn!r}; the {self.family} family takes attn: "
                             f"{'softmax (GPSConv multihead)' if attn else 'null'}")
        if self.gea:
            raise ValueError(f"model.gea: the {self.family} family has no GEANet branch; set gea: false")
        if self.attn_impl != "auto":
            raise ValueError(f"model.attn_impl: the {self.family} family runs PyG's own attention; leave it 'auto'")
        if self.pe is not None and self.pe.kind != "rw":
            raise ValueError(f"model.pe.kind: {self.pe.kind!r}; the {self.family} family reads RWPE only (kind: rw)")
        for section in ("layer_args", "mpnn_args", "attn_args", "gea_args", "pe_args"):
            if getattr(self, section):
                raise ValueError(f"model.{section}: the {self.family} family builds PyG's classes with PyG's "
                                 f"example settings and takes no pass-through arguments")
