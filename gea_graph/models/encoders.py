r"""Input encoders (node, edge, positional) and prediction heads shared by the model families."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import Dropout, Embedding, Linear, Module, ModuleList
from torch_geometric.nn.resolver import activation_resolver

from gea_graph.models.config import ModelConfig, PEConfig
from gea_graph.models.embeddings import ColumnEmbedding
from gea_graph.nn import LapPEEncoder, RWPEEncoder


class ConstantEdge(Module):
    r"""A single learned edge vector for graphs without edge features: ``[E] -> [E, C]``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.embedding = Embedding(1, channels)

    def reset_parameters(self) -> None:
        self.embedding.reset_parameters()

    def forward(self, num_edges: int) -> Tensor:
        return self.embedding.weight.expand(num_edges, -1)


# Per-column mean and std of the raw LRGB superpixel features (14 node columns: RGB mean, std, max, min,
# then the (y, x) position in pixels; 2 edge columns: boundary weight, distance), as published with the LRGB /
# Tönshoff et al. (2023) VOC/COCO encoders and used by the GEAET code's VOCNode/VOCEdge/COCONode/COCOEdge.
SUPERPIXEL_STATS: dict[str, dict[str, tuple[float, ...]]] = {
    "voc": {
        "node_mean": (4.5824501e-01, 4.3857411e-01, 4.0561178e-01, 6.7938097e-02, 6.5604292e-02, 6.5742709e-02,
                      6.5212941e-01, 6.2894762e-01, 6.0173863e-01, 2.7769071e-01, 2.6425251e-01, 2.3729359e-01,
                      1.9344997e+02, 2.3472206e+02),
        "node_std": (2.5952947e-01, 2.5716761e-01, 2.7130592e-01, 5.4822665e-02, 5.4429270e-02, 5.4474957e-02,
                     2.6238337e-01, 2.6600540e-01, 2.7750680e-01, 2.5197381e-01, 2.4986187e-01, 2.6069802e-01,
                     1.1768297e+02, 1.4007195e+02),
        "edge_mean": (0.07640745, 33.73478),
        "edge_std": (0.0868775, 20.945076),
    },
    "coco": {
        "node_mean": (4.6977347e-01, 4.4679317e-01, 4.0790915e-01, 7.0808627e-02, 6.8686441e-02, 6.8498217e-02,
                      6.7777938e-01, 6.5244222e-01, 6.2096798e-01, 2.7554795e-01, 2.5910738e-01, 2.2901227e-01,
                      2.4261935e+02, 2.8985367e+02),
        "node_std": (2.6218116e-01, 2.5831082e-01, 2.7416739e-01, 5.7440419e-02, 5.6832556e-02, 5.7100497e-02,
                     2.5929087e-01, 2.6201612e-01, 2.7675411e-01, 2.5456995e-01, 2.5140920e-01, 2.6182330e-01,
                     1.5152475e+02, 1.7630779e+02),
        "edge_mean": (0.07848548, 43.68736),
        "edge_std": (0.08902349, 28.473562),
    },
}


class StandardizedLinear(Module):
    r"""A linear map of standardised features, :math:`\mathbf{W}\,((\mathbf{x} - \boldsymbol{\mu}) /
    \boldsymbol{\sigma}) + \mathbf{b}`, with a fixed per-column mean and std (buffers, not learned): the
    VOC/COCO superpixel encoders of LRGB (``VOCNodeEncoder``, ``VOCEdgeEncoder``, ...). ``[N, F] -> [N, C]``."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], channels: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))
        self.lin = Linear(len(mean), channels)

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        return self.lin((x - self.mean) / self.std)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.mean.numel()}, {self.lin.out_features})"


def _superpixel_encoder(dataset: str, kind: str, columns: int, channels: int) -> StandardizedLinear:
    stats = SUPERPIXEL_STATS[dataset]
    width = len(stats[f"{kind}_mean"])
    if columns != width:
        raise ValueError(f"model.{kind}_in is {columns}, but the {dataset!r} {kind} encoder standardises the "
                         f"{width} LRGB superpixel columns")
    return StandardizedLinear(stats[f"{kind}_mean"], stats[f"{kind}_std"], channels)


def node_encoder(cfg: ModelConfig, channels: int) -> Module:
    r"""The node encoder of ``cfg`` mapping ``x`` to ``channels`` features."""
    if cfg.node_encoder == "atom":
        from gea_graph.models.ogb_encoders import AtomFeatureEncoder  # OGB (and scikit-learn) only where used

        return AtomFeatureEncoder(channels)
    if cfg.node_encoder == "embedding":
        if cfg.node_vocab <= 0:
            raise ValueError("model.node_vocab must be set for node_encoder: embedding")
        return ColumnEmbedding(cfg.node_in, cfg.node_vocab, channels)
    if cfg.node_encoder in SUPERPIXEL_STATS:
        return _superpixel_encoder(cfg.node_encoder, "node", cfg.node_in, channels)
    return Linear(cfg.node_in, channels)


def edge_encoder(cfg: ModelConfig, channels: int) -> Module | None:
    r"""The edge encoder of ``cfg`` (``None`` for ``edge_encoder: none``)."""
    if cfg.edge_encoder == "bond":
        from gea_graph.models.ogb_encoders import BondFeatureEncoder

        return BondFeatureEncoder(channels)
    if cfg.edge_encoder == "embedding":
        if cfg.edge_vocab <= 0:
            raise ValueError("model.edge_vocab must be set for edge_encoder: embedding")
        return ColumnEmbedding(cfg.edge_in, cfg.edge_vocab, channels)
    if cfg.edge_encoder == "linear":
        return Linear(cfg.edge_in, channels)
    if cfg.edge_encoder in SUPERPIXEL_STATS:
        return _superpixel_encoder(cfg.edge_encoder, "edge", cfg.edge_in, channels)
    return None


def pe_encoder(pe: PEConfig, **kwargs: Any) -> Module:
    r"""The positional-encoding encoder of ``pe`` (from :mod:`gea_graph.nn`), concatenating its output to the node
    embedding; ``kwargs`` (``model.pe_args``) go to the encoder class."""
    if pe.kind == "lap":
        return LapPEEncoder(pe.dim, model=pe.encoder, num_layers=pe.layers, k=pe.size, **kwargs)
    if pe.kind == "rw":
        return RWPEEncoder(pe.size, pe.dim, **kwargs)
    raise ValueError(f"model.pe.kind: {pe.kind!r} is not one of lap, rw")


def encode_pe(encoder: Module, pe: PEConfig, x: Tensor, batch) -> Tensor:
    r"""Runs the PE encoder on the batch fields of the data schema (``lap_eigvec`` / ``lap_eigval`` /
    ``lap_mask`` or ``rw_pe``): ``[N, d - dim] -> [N, d]``."""
    if pe.kind == "lap":
        return encoder(x, (batch.lap_eigvec, batch.lap_eigval, batch.lap_mask), batch=batch.batch,
                       num_graphs=batch.num_graphs)
    return encoder(x, batch.rw_pe)


class MLPHead(Module):
    r"""Prediction head: ``layers - 1`` hidden ``Linear(d, d)`` + activation (+ dropout), then ``Linear(d, out)``
    (the GraphGym MLP head: no normalisation)."""

    def __init__(self, channels: int, out_channels: int, layers: int = 2, dropout: float = 0.0,
                 act: str = "relu") -> None:
        super().__init__()
        if layers < 1:
            raise ValueError("model.head_layers must be at least 1")
        self.lins = ModuleList([Linear(channels, channels) for _ in range(layers - 1)])
        self.out = Linear(channels, out_channels)
        self.act = activation_resolver(act)
        self.dropout = Dropout(dropout)

    def reset_parameters(self) -> None:
        for lin in self.lins:
            lin.reset_parameters()
        self.out.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        for lin in self.lins:
            x = self.dropout(self.act(lin(x)))
        return self.out(x)
