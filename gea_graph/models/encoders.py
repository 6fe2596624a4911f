r"""Input encoders (node, edge, positional) and prediction heads shared by the model families."""
from __future__ import annotations

from typing import Any

from ogb.graphproppred.mol_encoder import AtomEncoder, BondEncoder
from torch import Tensor
from torch.nn import Dropout, Embedding, Linear, Module, ModuleList
from torch_geometric.nn.resolver import activation_resolver

from gea_graph.models.config import ModelConfig, PEConfig
from gea_graph.nn import LapPEEncoder, RWPEEncoder


class ColumnEmbedding(Module):
    r"""One embedding table per column of a long feature matrix ``[N, F]``, summed: ``[N, F] -> [N, C]``
    (TreeNeighbourMatch keys/values, other categorical features)."""

    def __init__(self, columns: int, vocab: int, channels: int) -> None:
        super().__init__()
        self.columns, self.vocab, self.channels = columns, vocab, channels
        self.tables = ModuleList([Embedding(vocab, channels) for _ in range(columns)])

    def reset_parameters(self) -> None:
        for table in self.tables:
            table.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        x = x.view(x.size(0), -1)
        return sum(table(x[:, i]) for i, table in enumerate(self.tables))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.columns}, vocab={self.vocab}, channels={self.channels})"


class ConstantEdge(Module):
    r"""A single learned edge vector for graphs without edge features: ``[E] -> [E, C]``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.embedding = Embedding(1, channels)

    def reset_parameters(self) -> None:
        self.embedding.reset_parameters()

    def forward(self, num_edges: int) -> Tensor:
        return self.embedding.weight.expand(num_edges, -1)


def node_encoder(cfg: ModelConfig, channels: int) -> Module:
    r"""The node encoder of ``cfg`` mapping ``x`` to ``channels`` features."""
    if cfg.node_encoder == "atom":
        return AtomEncoder(channels)
    if cfg.node_encoder == "embedding":
        if cfg.node_vocab <= 0:
            raise ValueError("model.node_vocab must be set for node_encoder: embedding")
        return ColumnEmbedding(cfg.node_in, cfg.node_vocab, channels)
    return Linear(cfg.node_in, channels)


def edge_encoder(cfg: ModelConfig, channels: int) -> Module | None:
    r"""The edge encoder of ``cfg`` (``None`` for ``edge_encoder: none``)."""
    if cfg.edge_encoder == "bond":
        return BondEncoder(channels)
    if cfg.edge_encoder == "embedding":
        if cfg.edge_vocab <= 0:
            raise ValueError("model.edge_vocab must be set for edge_encoder: embedding")
        return ColumnEmbedding(cfg.edge_in, cfg.edge_vocab, channels)
    if cfg.edge_encoder == "linear":
        return Linear(cfg.edge_in, channels)
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
        return encoder(x, (batch.lap_eigvec, batch.lap_eigval, batch.lap_mask), batch=batch.batch)
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
