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
        family: ``"geaet"`` (MPNN / attention / GEANet branches in parallel), ``"graphormer"``, ``"mpnn"``, or a
            peer of PyG's own classes (:mod:`gea_graph.models.pyg_peers`): ``"pyg_gps"`` (PyG's GPS example, RWPE
            only) or ``"pyg_gine"`` (a plain GINE network of the same size).
        task: One of :data:`TASKS`.
        out_channels: Outputs per prediction (targets, classes or labels; link ranking: the pair-embedding size).
        hidden, layers: Hidden size :math:`d` and number of layers.
        node_encoder: ``"atom"`` (OGB's ``AtomEncoder``), ``"embedding"`` (a table per column of a long ``x``,
            summed), ``"linear"`` (float ``x``), or ``"voc"`` / ``"coco"`` (LRGB's standardised superpixel encoders).
        node_in, node_vocab: Columns of ``x`` (``embedding``, ``linear``); rows of each table (``embedding``).
        edge_encoder: ``"bond"`` (OGB's ``BondEncoder``), ``"embedding"``, ``"linear"``, ``"voc"`` / ``"coco"``, or
            ``"none"`` (one learned edge vector where a layer needs edges).
        edge_in, edge_vocab: As ``node_in``, ``node_vocab`` for edges.
        mpnn: MPNN branch (``gatedgcn``, ``gcn``, ``gin``, ``gine``) or ``None``.
        attn: Global attention (``softmax``, ``gfsa``, ``plaplacian``, ``agf``) or ``None``.
        gea: GEANet branch on/off (``geaet``).
        heads, gea_heads: Heads of the global attention and of GEANet.
        units, edge_units, shared_unit, norm_scope: GEANet's :math:`S` (``None``: :math:`d / H`) and options.
        ffn: Feed-forward block after the branch sum (``geaet``; the ``mpnn`` family has none).
        norm, act: Normalisation (``batch_norm``, ``layer_norm``, ...) and activation names.
        local_out_act: Activation on the MPNN output in a GEAET layer (the ``mpnn`` family always applies it).
        dropout, attn_dropout: Dropout of the branches and the FFN; on the attention weights.
        attn_impl: The global attention's layout, ``"auto"``, ``"grouped"`` or ``"dense"`` (the same function).
        pe: Positional encoding, or ``None``.
        pooling: ``"mean"`` or ``"add"`` (graph tasks of the message-passing families).
        head_layers, head_dropout: Linear layers of the prediction head (``1``: one linear map); dropout between them.
        aux_weight: Weight of the layers' mean auxiliary loss (AGF's :math:`\gamma L_{ortho}`; ``0``: off).
        graphormer: Graphormer settings.
        layer_args: Further arguments of each layer (:class:`~gea_graph.nn.GEAETLayer` or
            :class:`~gea_graph.nn.GraphormerLayer`), e.g. ``{local_dropout: 0.1, external_dropout: 0.05}``.
        mpnn_args, attn_args, gea_args, pe_args: Further arguments of the MPNN branch, the global attention,
            :class:`~gea_graph.nn.GEANet` and the PE encoder, e.g. ``gea_args: {eps: null}``.

    The five ``*_args`` pass constructor arguments through; each key is checked against the class's signature, and
    one that a field above sets is an error (:mod:`gea_graph.models.layer_args`).
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
