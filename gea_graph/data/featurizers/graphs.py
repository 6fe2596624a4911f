r"""SMILES rows -> graphs (or a store's columns), with their positional encodings: the one featurisation path of the
dataset builds and of inference."""

from __future__ import annotations

import csv
import os.path as osp
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import Compose

from gea_graph.data.config import PathLike
from gea_graph.data.featurizers.base import InvalidSmilesError, MolArrays, UnknownAtomTypeError
from gea_graph.data.featurizers.molecule import FEATURE_WIDTHS, FEATURES, SizeBounds, check_features, read_smiles
from gea_graph.data.store import Columns
from gea_graph.io import atomic_write, ensure_folder
from gea_graph.transforms import RWPE, LapPE, ShortestPathDistance, apply_many

#: A row that gives no graph: ``(row, SMILES, reason)``.
BadRow = tuple[int, object, str]


def _target_rows(targets: np.ndarray, rows: int) -> np.ndarray:
    r"""Targets as float32 ``[rows, T]`` (``[0, T]`` for no rows: an empty input is an empty table)."""
    targets = np.asarray(targets, dtype=np.float32)
    return targets.reshape(rows, -1) if rows else targets.reshape(0, targets.shape[-1] if targets.ndim > 1 else 1)


def _featurized(smiles: Sequence[object], rows: Sequence[int] | np.ndarray, features: str, bad: list[BadRow],
                refused: list[tuple[int, str]] | None = None, bounds: SizeBounds | None = None
                ) -> Iterator[tuple[int, str, MolArrays]]:
    r"""``(row, SMILES, arrays)`` of the rows :func:`~gea_graph.data.featurizers.molecule.read_smiles` accepts,
    featurised by :obj:`features`; the others are appended to :obj:`bad` with their reason. A molecule outside the
    vocabulary raises :class:`UnknownAtomTypeError`, or, with a :obj:`refused` list, is appended to it as
    ``(row, reason)``."""
    check_features(features)  # now, not at the first row
    featurizer, bounds = FEATURES[features], bounds or SizeBounds()

    def parse() -> Iterator[tuple[int, str, MolArrays]]:
        for row in np.asarray(rows, dtype=np.int64).tolist():
            mol, smi, reason = read_smiles(smiles[row], bounds)
            if mol is None:
                bad.append((row, smiles[row], reason))
                continue
            try:
                yield row, smi, featurizer(mol, smi)
            except UnknownAtomTypeError as err:
                if refused is None:
                    raise
                refused.append((row, err.reason))

    return parse()


def molecule_graphs(smiles: Sequence[object], targets: np.ndarray, rows: Sequence[int] | np.ndarray,
                    features: str = "ogb", refused: list[tuple[int, str]] | None = None,
                    bounds: SizeBounds | None = None) -> tuple[list[Data], np.ndarray, list[BadRow]]:
    r"""Graphs of rows :obj:`rows` of a SMILES list with ``y = targets[row]`` (``targets`` is ``[M, T]``; ``y`` of shape
    ``[1]`` when :math:`T = 1`, else ``[1, T]``), featurised by :obj:`features` (a key of
    :data:`~gea_graph.data.featurizers.FEATURES`), within :obj:`bounds` (default
    :class:`~gea_graph.data.featurizers.SizeBounds`).

    Returns ``(graphs, kept, bad)``: the graphs of the accepted rows, their row numbers ``[G]``, and
    ``(row, SMILES, reason)`` of the others (RDKit cannot parse them, whitespace inside, beyond the bounds). A
    molecule outside the vocabulary raises, or is appended to :obj:`refused` as ``(row, reason)`` when that list is
    given. One process; datasets run it on chunks in parallel."""
    targets = _target_rows(targets, len(smiles))
    graphs, kept, bad = [], [], []
    for row, smi, (x, edge_index, edge_attr) in _featurized(smiles, rows, features, bad, refused, bounds):
        y = torch.from_numpy(targets[row].copy() if targets.shape[1] == 1 else targets[row:row + 1].copy())
        graphs.append(Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(edge_index),
                           edge_attr=torch.from_numpy(edge_attr), y=y, smiles=smi, num_nodes=x.shape[0]))
        kept.append(row)
    return graphs, np.array(kept, dtype=np.int64), bad


#: The pre-transforms :func:`molecule_columns` applies on arrays: node-level positional encodings computed from
#: ``edge_index`` alone, and Graphormer's shortest paths.
COLUMN_TRANSFORMS = (LapPE, RWPE, ShortestPathDistance)


def column_transforms(transform: Callable | None) -> list | None:
    r"""The parts of a pre-transform (a :class:`~torch_geometric.transforms.Compose` is unrolled) when
    :func:`molecule_columns` can apply all of them (:data:`COLUMN_TRANSFORMS`), else :obj:`None`."""
    parts = [] if transform is None else list(transform.transforms) if isinstance(transform, Compose) else [transform]
    return parts if all(type(p) in COLUMN_TRANSFORMS for p in parts) else None


def molecule_columns(smiles: Sequence[object], targets: np.ndarray, rows: Sequence[int] | np.ndarray,
                     features: str = "ogb", transform: Callable | None = None,
                     refused: list[tuple[int, str]] | None = None, bounds: SizeBounds | None = None
                     ) -> tuple[Columns, np.ndarray, list[BadRow]]:
    r"""What :func:`molecule_graphs` gives (and, with :obj:`transform`, that pre-transform on each graph: LapPE,
    RWPE, shortest paths or a ``Compose`` of them, see :func:`column_transforms`), as the store's columns directly:
    no :class:`~torch_geometric.data.Data` per molecule. Returns ``(columns, kept, bad)``; the store holds the same
    graphs either way (tested)."""
    parts = column_transforms(transform)
    if parts is None:
        raise ValueError(f"molecule_columns applies {[t.__name__ for t in COLUMN_TRANSFORMS]} only, not {transform!r}")
    targets = _target_rows(targets, len(smiles))
    xs, edges, attrs, texts, kept, bad = [], [], [], [], [], []
    for row, smi, (x, edge_index, edge_attr) in _featurized(smiles, rows, features, bad, refused, bounds):
        xs.append(x)
        edges.append(edge_index)
        attrs.append(edge_attr)
        texts.append(smi)
        kept.append(row)
    kept_rows = np.array(kept, dtype=np.int64)
    num_nodes = np.array([x.shape[0] for x in xs], dtype=np.int64)
    num_edges = np.array([e.shape[1] for e in edges], dtype=np.int64)
    width = FEATURE_WIDTHS[features]
    edge_index = np.concatenate(edges, axis=1) if edges else np.zeros((2, 0), np.int64)
    out = Columns(num_nodes)
    out.add("x", np.concatenate(xs) if xs else np.zeros((0, width[0]), np.int64), num_nodes, torch.int64)
    out.add("edge_index", edge_index.T, num_edges, torch.int64, cat_dim=1, inc=True)
    out.add("edge_attr", np.concatenate(attrs) if attrs else np.zeros((0, width[1]), np.int64), num_edges,
            torch.int64)
    y = targets[kept_rows]
    out.add("y", y[:, 0] if targets.shape[1] == 1 else y, np.ones(len(kept_rows), np.int64), torch.float32)
    out.add_text("smiles", texts)
    for part in parts:
        if isinstance(part, ShortestPathDistance):
            spd, path = part.arrays_many(num_nodes, edge_index, num_edges)
            pairs = num_nodes * num_nodes
            out.add("spd", spd, pairs, torch.int64)
            out.add("spd_path", path, pairs, torch.int64)
            out.add_derived("spd_index")
            continue
        # Node-level encodings read edge_index and num_nodes only: graph stubs instead of Data objects.
        stubs = [SimpleNamespace(edge_index=torch.from_numpy(e), num_nodes=int(n)) for e, n in zip(edges, num_nodes)]
        part.forward_many(stubs)
        for key in (vars(stubs[0]) if stubs else {}):
            if key in ("edge_index", "num_nodes"):
                continue
            values = [getattr(stub, key) for stub in stubs]
            out.add(key, np.concatenate([v.numpy() for v in values]), num_nodes, values[0].dtype)
    return out, kept_rows, bad


def featurize_chunk(smiles: Sequence[object], targets: np.ndarray, rows: Sequence[int] | np.ndarray, features: str,
                    pre_transform: Callable | None = None, pre_filter: Callable | None = None,
                    refused: list[tuple[int, str]] | None = None, desc: str = "featurize",
                    bounds: SizeBounds | None = None) -> tuple[list[Data] | Columns, np.ndarray, list[BadRow]]:
    r"""One chunk of a molecular dataset build: rows :obj:`rows` of :obj:`smiles` featurised by :obj:`features`
    within :obj:`bounds`, filtered by :obj:`pre_filter` and pre-transformed (the positional encodings of a ``pe``
    spec) by :obj:`pre_transform`. This is the one featurisation path: the dataset build runs it on its chunks, and
    inference (:mod:`gea_graph.inference`) on the SMILES it is given, so a trained model sees new molecules exactly
    as it saw its training set.

    Returns ``(graphs, kept, bad)`` as :func:`molecule_graphs`: the graphs as store columns (without a pre-filter
    and with positional encodings and shortest paths only: no ``Data`` per molecule, see
    :func:`molecule_columns`) or as a list of ``Data``; their rows; the refused rows with their reasons. Molecules
    outside the vocabulary raise, or go to :obj:`refused` when given (see :func:`molecule_graphs`)."""
    if pre_filter is None and column_transforms(pre_transform) is not None:  # arrays straight into columns
        return molecule_columns(smiles, targets, rows, features, pre_transform, refused, bounds)
    graphs, kept, bad = molecule_graphs(smiles, targets, rows, features, refused, bounds)
    if pre_filter is not None:
        keep = [i for i, g in enumerate(graphs) if pre_filter(g)]
        graphs, kept = [graphs[i] for i in keep], kept[keep]
    return apply_many(pre_transform, graphs, desc=desc), kept, bad


def _shown(smiles: object, limit: int = 80) -> str:
    text = repr(smiles)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(smiles)):,} characters)"


def invalid_smiles_error(source: str, bad: Sequence[BadRow]) -> InvalidSmilesError:
    r"""The one-line error of a build that met rows :obj:`bad`: the first, its reason and how many more."""
    row, smi, reason = bad[0]
    return InvalidSmilesError(
        f"{source}: row {row} (0-based, header excluded) is refused: {reason}: {_shown(smi)}"
        f"{f' ({len(bad) - 1} more such rows)' if len(bad) > 1 else ''}. Fix or remove the row, or pass "
        f"skip_invalid=True to skip such rows (they are then listed in a report file).")


def write_skipped(path: PathLike, bad: Sequence[BadRow]) -> None:
    r"""The report of skipped rows: a CSV of ``row, smiles, reason`` (SMILES beyond the bounds shortened)."""
    ensure_folder(osp.dirname(osp.abspath(path)))
    with atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["row", "smiles", "reason"])
        writer.writerows((row, smi if len(str(smi)) <= 1000 else _shown(smi), reason) for row, smi, reason in bad)


def featurize(smiles: Sequence[str], targets: np.ndarray, source: str, skip_invalid: bool = False,
              report_path: PathLike | None = None, features: str = "ogb",
              bounds: SizeBounds | None = None) -> list[Data | None]:
    r"""Turns SMILES into graphs (see :func:`molecule_graphs`), one per row, in one process (datasets build in
    parallel chunks instead).

    A row that gives no graph (RDKit cannot parse it, whitespace inside, beyond :obj:`bounds`) raises
    :class:`InvalidSmilesError` naming its row, text and reason. With :obj:`skip_invalid`, such rows become
    :obj:`None` in the output instead, and are listed (row, SMILES, reason) in a CSV at :obj:`report_path`.
    """
    graphs, kept, bad = molecule_graphs(smiles, targets, np.arange(len(smiles)), features, bounds=bounds)
    if bad and not skip_invalid:
        raise invalid_smiles_error(source, bad)
    if skip_invalid and report_path is not None:
        write_skipped(report_path, bad)
    out: list[Data | None] = [None] * len(smiles)
    for row, graph in zip(kept.tolist(), graphs):
        out[row] = graph
    return out
