r"""Random graphs in the data schema a model expects: what ``gea-graph selfcheck`` and the tests feed every model
family without any dataset on disk."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from gea_graph.models.config import ModelConfig


def _columns(dims: Sequence[int], n: int, gen: torch.Generator) -> Tensor:
    return torch.stack([torch.randint(0, d, (n,), generator=gen) for d in dims], dim=1)


def synthetic_graph(cfg: ModelConfig, num_nodes: int, gen: torch.Generator) -> Data:
    r"""A random tree of ``num_nodes`` nodes (both edge directions) with the fields the dataset of ``cfg`` gives:
    node and edge features as its encoders read them (OGB atom / bond columns, embedding indices or floats) and the
    target of its task (``y``; ``target_mask`` for TreeNeighbourMatch, ``edge_label_index`` / ``edge_label`` for
    link ranking)."""
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    n = num_nodes
    src = torch.arange(1, n)
    dst = torch.randint(0, n, (n - 1,), generator=gen) % torch.arange(1, n)  # a random tree
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    if cfg.node_encoder == "atom":
        x = _columns(get_atom_feature_dims(), n, gen)
    elif cfg.node_encoder == "embedding":
        x = torch.randint(0, cfg.node_vocab, (n, cfg.node_in), generator=gen)
    else:
        x = torch.randn(n, cfg.node_in, generator=gen)
    data = Data(x=x, edge_index=edge_index, num_nodes=n)
    num_edges = edge_index.size(1)
    if cfg.edge_encoder == "bond":
        data.edge_attr = _columns(get_bond_feature_dims(), num_edges, gen)
    elif cfg.edge_encoder == "embedding":
        data.edge_attr = torch.randint(0, cfg.edge_vocab, (num_edges, cfg.edge_in), generator=gen)
    elif cfg.edge_encoder in ("linear", "voc", "coco"):
        data.edge_attr = torch.randn(num_edges, cfg.edge_in, generator=gen)
    classes = cfg.out_channels
    if cfg.task == "graph_regression":
        data.y = torch.randn(1, classes, generator=gen)
    elif cfg.task == "graph_multilabel":
        data.y = torch.randint(0, 2, (1, classes), generator=gen).float()
    elif cfg.task in ("graph_classification", "target_node"):
        data.y = torch.randint(0, classes, (1,), generator=gen)
    elif cfg.task == "node_classification":
        data.y = torch.randint(0, classes, (n,), generator=gen)
    if cfg.task == "target_node":
        data.target_mask = torch.zeros(n, dtype=torch.bool)
        data.target_mask[0] = True
    if cfg.task == "link_ranking":
        data.edge_label_index = torch.randint(0, n, (2, 4), generator=gen)
        data.edge_label = torch.tensor([1, 1, 0, 0])
    return data


def synthetic_batch(cfg: ModelConfig, pe: str | None = None, sizes: Sequence[int] = (5, 9, 7),
                    seed: int = 0) -> Batch:
    r"""A batch of :func:`synthetic_graph` of the given sizes, with the positional encodings ``pe`` (a data
    ``pe`` spec, e.g. ``"rw:20"`` or ``"spd:20"``) computed as the dataset would."""
    from gea_graph.transforms import parse_pe

    gen = torch.Generator().manual_seed(seed)
    graphs = [synthetic_graph(cfg, n, gen) for n in sizes]
    transform = parse_pe(pe)
    if transform is not None:
        graphs = [transform(g) for g in graphs]
    return Batch.from_data_list(graphs)
