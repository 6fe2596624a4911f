"""Test helpers: real ZINC molecules as graphs, a tiny attention model built straight from ``gea_graph.nn`` layers
(for tests that need no training), and a pixel probe for pictures."""

from __future__ import annotations

import io

import matplotlib.image
import numpy as np
import torch
from ogb.utils import smiles2graph
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from gea_graph.nn.attention import MultiheadAttention, from_dense, to_dense
from gea_graph.nn.external_attention import ExternalAttention

ZINC_SMILES = [
    "CC(C)(C)c1ccc2occ(CC(=O)Nc3ccccc3F)c2c1",
    "C[C@@H]1CC(Nc2cncc(-c3nncn3C)c2)C[C@@H](C)C1",
    "Cn1nc(Br)cc1N",
]


def zinc_graph(smiles: str) -> Data:
    g = smiles2graph(smiles)
    return Data(
        x=torch.from_numpy(g["node_feat"]),
        edge_index=torch.from_numpy(g["edge_index"]),
        edge_attr=torch.from_numpy(g["edge_feat"]),
        smiles=smiles,
    )


class ToyLayer(nn.Module):
    """Residual dense self-attention (optionally with a Graphormer-style graph token at position 0), plus external
    attention when ``external``, as in a GEAET layer."""

    def __init__(self, channels: int, heads: int, token: bool, external: bool):
        super().__init__()
        self.attn = MultiheadAttention(channels, heads)
        self.token = nn.Parameter(torch.randn(1, 1, channels)) if token else None
        self.external = ExternalAttention(channels, heads) if external else None

    def dense_input(self, x: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
        xd, mask = to_dense(x, batch)
        if self.token is not None:
            xd = torch.cat([self.token.expand(xd.shape[0], 1, -1), xd], dim=1)
            mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], dim=1)
        return xd, mask

    def forward(self, x: Tensor, batch: Tensor) -> Tensor:
        xd, mask = self.dense_input(x, batch)
        out = self.attn(xd, mask)
        if self.token is not None:
            out, mask = out[:, 1:], mask[:, 1:]
        gea = self.external(x, batch)[0] if self.external is not None else 0.0
        return x + from_dense(out, mask) + gea


class ToyModel(nn.Module):
    def __init__(
        self,
        channels: int = 16,
        heads: int = 2,
        depth: int = 2,
        token: bool = True,
        external: bool = True,
    ):
        super().__init__()
        self.embed = nn.Embedding(120, channels)
        self.layers = nn.ModuleList(
            ToyLayer(channels, heads, token, external) for _ in range(depth)
        )

    def forward(self, batch: Batch) -> Tensor:
        x = self.embed(batch.x[:, 0])
        for layer in self.layers:
            x = layer(x, batch.batch)
        return x


def redness(png: bytes, xy: np.ndarray, radius: int = 5) -> float:
    """Largest R - G over the pixels within ``radius`` of ``xy`` (black bonds and symbols score 0)."""
    img = matplotlib.image.imread(io.BytesIO(png), format="png")
    h, w = img.shape[:2]
    x, y = round(float(xy[0])), round(float(xy[1]))
    ys, xs = np.mgrid[
        max(0, y - radius) : min(h, y + radius + 1), max(0, x - radius) : min(w, x + radius + 1)
    ]
    disk = (xs - x) ** 2 + (ys - y) ** 2 <= radius**2
    patch = img[ys[disk], xs[disk]]
    return float((patch[:, 0] - patch[:, 1]).max())
