r"""What a trained model can be given, in chunks of consecutive inputs: SMILES (featurised as in training), PyG
graphs (``Data``, ``Batch``, a dataset) or a built-in dataset's split.

Every source yields :class:`InputChunk` objects: a run of inputs, the graphs of the valid ones (readable as batches)
and a reason for each invalid one. Chunks keep memory bounded whatever the number of inputs: a chunk's graphs are
made when it is reached and dropped after it.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch_geometric.data import Batch, Data
from torch_geometric.data import Dataset as PyGDataset

from gea_graph.data.featurizer import Featurized, Featurizer, chunk_rows
from gea_graph.data.featurizers import SizeBounds


@dataclass
class InputChunk:
    r"""Inputs ``start .. start + size - 1`` of a source: their graphs (:attr:`graphs`: the valid inputs'
    positions within the chunk, a reason for every other one), the SMILES given (:obj:`None` for graphs, whose
    ``smiles`` field, when they have one, is read from their batches) and the rows' ids (:obj:`None`: their
    positions)."""

    start: int
    size: int
    graphs: Featurized
    smiles: list[Any] | None = None
    ids: list[Any] | None = None


class _GraphView:
    r"""Graphs :obj:`index` of a list of ``Data`` or a PyG dataset, read as batches (a gea-graph dataset's own
    column-wise :meth:`~gea_graph.data.CachedDataset.batch` where it has one)."""

    def __init__(self, graphs: Any, index: np.ndarray, sizes: np.ndarray | None = None) -> None:
        self.graphs, self.index, self.sizes = graphs, index, sizes

    def num_nodes_per_graph(self) -> np.ndarray | None:
        r"""The node counts of this view's graphs, from a gea-graph dataset's store (:obj:`None` otherwise)."""
        return None if self.sizes is None else self.sizes[self.index]

    def batch(self, positions: Sequence[int] | np.ndarray) -> Batch:
        index = self.index[np.asarray(positions, dtype=np.int64)]
        if callable(getattr(self.graphs, "batch", None)) and not isinstance(self.graphs, list):
            return self.graphs.batch(index)
        return Batch.from_data_list([self.graphs[int(i)] for i in index])


def smiles_chunks(smiles: Sequence[Any], featurizer: Featurizer, size: int | None = None,
                  bounds: SizeBounds | None = None) -> Iterator[InputChunk]:
    r"""Chunks of a list of SMILES, featurised by :obj:`featurizer` chunk by chunk, each within :obj:`bounds`
    (default :class:`~gea_graph.data.SizeBounds`)."""
    size = size or chunk_rows()
    for start in range(0, len(smiles), size):
        part = list(smiles[start:start + size])
        yield InputChunk(start, len(part), featurizer.featurize(part, bounds), part)


def _store_sizes(graphs: Any) -> np.ndarray | None:
    r"""The node counts of a gea-graph dataset's graphs, read from its store without building them (:obj:`None` for
    a list or a dataset without a store, e.g. TreeNeighbourMatch's shared tree)."""
    sizes = getattr(graphs, "num_nodes_per_graph", None)
    if isinstance(graphs, list) or not callable(sizes) or getattr(graphs, "store", None) is None:
        return None
    return np.asarray(sizes(), dtype=np.int64)


def graph_chunks(graphs: Any, size: int | None = None, bounds: SizeBounds | None = None) -> Iterator[InputChunk]:
    r"""Chunks of PyG graphs (a ``Data``, a ``Batch``, a list of ``Data`` or a PyG dataset), taken as they are: they
    must hold the fields the model was trained on. A graph beyond :obj:`bounds` (default
    :class:`~gea_graph.data.SizeBounds`; nodes and edges of a list's graphs, nodes of a dataset's) is an invalid
    input with its reason."""
    if isinstance(graphs, Batch):
        graphs = graphs.to_data_list()
    elif isinstance(graphs, Data):
        graphs = [graphs]
    if not isinstance(graphs, (list, tuple, PyGDataset)):
        raise TypeError(f"inputs must be a list of SMILES, a PyG Data, Batch or Dataset, or a dataset name with "
                        f"split=..., got {type(graphs).__name__}")
    if isinstance(graphs, tuple):
        graphs = list(graphs)
    bounds = bounds or SizeBounds()
    sizes = _store_sizes(graphs)
    total = len(graphs)
    size = size or chunk_rows()
    for start in range(0, total, size):
        count = min(size, total - start)
        errors = {}
        for i in range(count):
            if sizes is not None:
                reason = bounds.graph_reason(int(sizes[start + i]), 0)
            elif isinstance(graphs, list):
                reason = bounds.graph_reason(int(graphs[start + i].num_nodes or 0), int(graphs[start + i].num_edges))
            else:
                reason = None
            if reason is not None:
                errors[i] = reason
        valid = np.array([i for i in range(count) if i not in errors], dtype=np.int64)
        yield InputChunk(start, count, Featurized(_GraphView(graphs, start + valid, sizes), valid, errors), None)


def is_smiles_list(inputs: Any) -> bool:
    r"""Whether :obj:`inputs` is a list (or tuple) of SMILES strings (empty cells allowed: ``None``)."""
    return (isinstance(inputs, (list, tuple)) and len(inputs) > 0
            and all(isinstance(s, str) or s is None for s in inputs)
            and any(isinstance(s, str) for s in inputs))
