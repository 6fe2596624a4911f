r"""Model and data agree before training starts: each encoder reads as many feature columns as the data has, of
the right kind (integer indices or float values), and every index lies inside its embedding table.

A disagreement is one line naming the recipe keys (``model.node_encoder``, ``model.node_in``,
``model.node_vocab``, their ``edge_`` twins) and what the data holds, raised by :func:`check_model_data` before any
epoch: a 1-column, 28-type ZINC embedding fed a CSV's 9 OGB atom columns would otherwise train on the atomic number
read as a ZINC type, and fail only at the first batch holding an atom beyond 28.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch_geometric.data import Dataset

from gea_graph.models.encoders import SUPERPIXEL_STATS

#: Rows read at a time from a store's column (the memory of the check).
_BLOCK_ROWS = 1 << 20
#: Graphs read one by one from a dataset without a store (a sample: such datasets are small or generated).
_SAMPLE_GRAPHS = 2000


class ModelDataMismatch(ValueError):
    r"""The recipe's model cannot read the recipe's data (one line, naming the keys)."""


@dataclass
class ColumnStats:
    r"""What a feature field holds over the data: its columns, whether it is floating point, and each column's
    smallest and largest value (integer fields)."""

    columns: int
    floating: bool
    low: np.ndarray
    high: np.ndarray


def _merge(parts: list[np.ndarray]) -> ColumnStats | None:
    parts = [p.reshape(len(p), -1) for p in parts if p is not None]
    if not parts:
        return None
    widths = {p.shape[1] for p in parts}
    columns = max(widths)
    floating = any(np.issubdtype(p.dtype, np.floating) for p in parts)
    nonempty = [p for p in parts if len(p) and p.shape[1] == columns]
    if floating or not nonempty:
        return ColumnStats(columns, floating, np.zeros(columns), np.zeros(columns))
    low = np.min([p.min(axis=0) for p in nonempty], axis=0)
    high = np.max([p.max(axis=0) for p in nonempty], axis=0)
    return ColumnStats(columns, floating, low, high)


def _blocks(column: np.ndarray) -> list[np.ndarray]:
    r"""Per-block ``[min; max]`` rows of a (memory-mapped) column, so a 3.7M-molecule store is read in pieces."""
    column = column.reshape(len(column), -1)
    if np.issubdtype(column.dtype, np.floating):
        return [np.asarray(column[:1], dtype=np.float32)]
    out = []
    for start in range(0, len(column), _BLOCK_ROWS):
        block = np.asarray(column[start:start + _BLOCK_ROWS])
        out.append(np.stack([block.min(axis=0), block.max(axis=0)]).astype(np.int64))
    return out or [np.zeros((0, column.shape[1]), np.int64)]


def field_stats(splits: Mapping[str, Dataset], key: str) -> ColumnStats | None:
    r"""The :class:`ColumnStats` of field :obj:`key` (``x`` or ``edge_attr``) over all splits, :obj:`None` when the
    graphs have no such field. A gea-graph dataset is read from its store (every split at once, in blocks); others
    graph by graph (the first :data:`_SAMPLE_GRAPHS` of each split)."""
    parts: list[np.ndarray] = []
    stores = set()
    for dataset in splits.values():
        store = getattr(dataset, "store", None)
        if store is not None and hasattr(store, "columns"):
            if id(store) not in stores and key in store.columns:
                stores.add(id(store))
                parts += _blocks(store.columns[key])
            continue
        for i in range(min(len(dataset), _SAMPLE_GRAPHS)):
            value = getattr(dataset[i], key, None)
            if isinstance(value, torch.Tensor):
                parts.append(value.numpy() if value.dim() > 1 else value.numpy().reshape(-1, 1))
    return _merge(parts)


def _expected(encoder: str, kind: str, columns: int, vocab: int) -> tuple[int, bool, list[int] | None, str]:
    r"""What an encoder reads: ``(columns, floating, table sizes or None, the recipe keys that say so)``."""
    prefix = f"model.{kind}_"
    if encoder == "atom":
        return 9, False, get_atom_feature_dims(), f"{prefix}encoder: atom (OGB's AtomEncoder, 9 atom columns)"
    if encoder == "bond":
        return 3, False, get_bond_feature_dims(), f"{prefix}encoder: bond (OGB's BondEncoder, 3 bond columns)"
    if encoder == "embedding":
        return (columns, False, [vocab] * columns,
                f"{prefix}encoder: embedding with {prefix}in: {columns} and {prefix}vocab: {vocab}")
    if encoder in SUPERPIXEL_STATS:
        return (len(SUPERPIXEL_STATS[encoder][f"{kind}_mean"]), True, None,
                f"{prefix}encoder: {encoder} ({prefix}in: {columns})")
    return columns, True, None, f"{prefix}encoder: {encoder} with {prefix}in: {columns}"


def _advice(kind: str, stats: ColumnStats) -> str:
    prefix = f"model.{kind}_"
    if stats.floating:
        return f"set {prefix}encoder: linear with {prefix}in: {stats.columns}"
    ogb = (9, "atom") if kind == "node" else (3, "bond")
    vocab = int(stats.high.max()) + 1 if len(stats.high) else 1
    if stats.columns == ogb[0]:
        return (f"set {prefix}encoder: {ogb[1]} (OGB's features), or {prefix}in: {stats.columns} with "
                f"{prefix}vocab: {max(vocab, 1)} or more")
    return f"set {prefix}encoder: embedding with {prefix}in: {stats.columns} and {prefix}vocab: {vocab} or more"


def check_model_data(recipe, splits: Mapping[str, Dataset]) -> None:
    r"""Raises :class:`ModelDataMismatch` (one line naming the recipe keys) when the model of :obj:`recipe` cannot
    read the node features ``x`` or edge features ``edge_attr`` of :obj:`splits`: a different number of columns,
    floats where indices are embedded (or the reverse), or an index outside its embedding table."""
    cfg = recipe.model
    data = recipe.data
    label = (f"data.csv {data.csv}" if data.csv else f"data.name {data.name}" if data.name else f"data.cls {data.cls}")
    if data.name and (data.options or {}).get("features"):
        label += f" (data.options.features: {data.options['features']})"
    for kind, key in (("node", "x"), ("edge", "edge_attr")):
        encoder = getattr(cfg, f"{kind}_encoder")
        if encoder == "none":
            continue
        stats = field_stats(splits, key)
        if stats is None:
            continue
        columns, floating, tables, says = _expected(encoder, kind, getattr(cfg, f"{kind}_in"),
                                                    getattr(cfg, f"{kind}_vocab", 0))
        holds = f"{label} gives {key} with {stats.columns} {'float' if stats.floating else 'integer'} column(s)"
        if stats.columns != columns or (stats.floating and not floating):
            raise ModelDataMismatch(f"model and data disagree: {says} reads {columns} "
                                    f"{'float' if floating else 'integer'} column(s), but {holds}; "
                                    f"{_advice(kind, stats)}")
        if tables is None or stats.floating or not len(stats.high):
            continue
        for c, (low, high, size) in enumerate(zip(stats.low.tolist(), stats.high.tolist(), tables)):
            if low < 0 or high >= size:
                raise ModelDataMismatch(f"model and data disagree: {says} has an embedding table of {size} rows "
                                        f"for {key} column {c}, but {label} holds values {low}..{high} there; "
                                        f"{_advice(kind, stats)}")
