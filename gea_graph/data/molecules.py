r"""The shared build of the molecular datasets: raw SMILES (:meth:`_MoleculeDataset.source`) featurised in parallel,
resumable chunks into the dataset's store, within the size bounds.

The datasets live in their own modules (:mod:`~gea_graph.data.zinc`, :mod:`~gea_graph.data.peptides`,
:mod:`~gea_graph.data.pcqm4m`, :mod:`~gea_graph.data.molecule_csv`) and featurisation in
:mod:`gea_graph.data.featurizers`; the names below stay importable from here.

OGB features (every molecular dataset; ZINC with ``features="ogb"``): ``x`` ``[N, 9] long`` (``AtomEncoder``
applies), ``edge_attr`` ``[E, 3] long`` (``BondEncoder`` applies). The Benchmarking-GNNs encoding (ZINC's default,
``features="bench"``): ``x`` ``[N, 1] long`` in ``0..27`` (:data:`ZINC_ATOM_TYPES`), ``edge_attr`` ``[E, 1] long``
in ``1..3`` (:data:`ZINC_BOND_TYPES`); recipes embed them with ``node_encoder: embedding`` (``node_in: 1``,
``node_vocab: 28``) and ``edge_encoder: embedding`` (``edge_in: 1``, ``edge_vocab: 4``).
"""

from __future__ import annotations

import os
import os.path as osp
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from torch_geometric.data import Data

from gea_graph.data.base import CachedDataset, file_stamps
from gea_graph.data.config import PathLike
from gea_graph.data.featurizers import (
    FEATURE_WIDTHS,
    FEATURES,
    ZINC_ATOM_TYPES,
    ZINC_BOND_TYPES,
    InvalidSmilesError,
    SizeBounds,
    UnknownAtomTypeError,
    featurize,
    featurize_chunk,
    invalid_smiles_error,
    write_skipped,
)
from gea_graph.data.store import Columns, build_store, chunk_rows_for

# What torch.load(weights_only=True) must admit to read OGB's split_dict.pt (numpy arrays of indices).
_NUMPY_SAFE_GLOBALS = [np.ndarray, np.dtype, np.dtypes.Int64DType, np.dtypes.Int32DType]
try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover
    from numpy.core.multiarray import _reconstruct
_NUMPY_SAFE_GLOBALS.append(_reconstruct)

__all__ = ["FEATURES", "FEATURE_WIDTHS", "ZINC_ATOM_TYPES", "ZINC_BOND_TYPES", "InvalidSmilesError", "MoleculeSource",
           "UnknownAtomTypeError", "featurize", "featurize_chunk"]


@dataclass
class MoleculeSource:
    """What a molecular dataset reads from its raw files: SMILES, targets ``[M, T]``, the file named in errors, the
    raw files whose size and time stamp identify the input of a resumed build, and each split's rows (in the
    split's order; a function of the rows RDKit could parse where the split depends on them)."""

    smiles: list
    targets: np.ndarray
    path: str
    split_rows: dict[str, np.ndarray] | Callable[[np.ndarray], dict[str, np.ndarray]]
    files: Sequence[str] = ()


class _MoleculeDataset(CachedDataset):
    """Shared build of the molecular datasets: the raw SMILES (:meth:`source`) are featurised, filtered and
    pre-transformed in parallel chunks (``$GEA_GRAPH_CHUNK_ROWS`` rows, else
    :func:`~gea_graph.data.store.chunk_rows_for`: about four per worker, at most :attr:`chunk_rows`; workers
    ``$GEA_GRAPH_WORKERS``) into the dataset's store (:func:`~gea_graph.data.store.build_store`: resumable, atomic).
    Option :obj:`skip_invalid`: see :func:`~gea_graph.data.featurizers.featurize`. Options :obj:`max_nodes` and
    :obj:`max_edges` (recipe keys ``data.options.max_nodes`` / ``max_edges``) set the
    :class:`~gea_graph.data.featurizers.SizeBounds` of its molecules: a larger one is refused like an unparsable
    SMILES, naming its row (or skipped, with :obj:`skip_invalid`)."""

    #: The featurisation (a key of :data:`~gea_graph.data.featurizers.FEATURES`); only :class:`ZINC` offers a choice.
    features: str = "ogb"
    #: Most rows of a build chunk (a worker's memory).
    chunk_rows: ClassVar[int] = 10_000

    def __init__(self, root: PathLike | None = None, split: str = "train", transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None,
                 pe: str | None = None, force_reload: bool = False, skip_invalid: bool = False,
                 max_nodes: int | None = None, max_edges: int | None = None) -> None:
        self.skip_invalid = skip_invalid
        self.bounds = SizeBounds(**{k: v for k, v in (("max_nodes", max_nodes), ("max_edges", max_edges))
                                    if v is not None})
        super().__init__(root, split, transform, pre_transform, pre_filter, pe, force_reload)

    def cache_extra(self) -> str:
        # Other bounds may keep other rows: part of the key (the default keeps the caches built before bounds).
        bounds = "" if self.bounds.is_default else f"bounds={self.bounds.max_nodes},{self.bounds.max_edges}"
        return "|".join(filter(None, ["skip_invalid" if self.skip_invalid else "", bounds]))

    @property
    def report_path(self) -> str:
        """Where skipped SMILES are listed when :obj:`skip_invalid` is set."""
        return osp.join(self.processed_dir, "skipped_smiles.csv")

    def source(self) -> MoleculeSource:
        raise NotImplementedError

    def process(self) -> None:
        src = self.source()
        total = len(src.smiles)
        given = os.environ.get("GEA_GRAPH_CHUNK_ROWS")
        size = int(given) if given is not None else chunk_rows_for(total, self.chunk_rows)
        if size < 1:
            raise ValueError(f"GEA_GRAPH_CHUNK_ROWS must be a positive number of rows, got {size}")
        num_chunks = max(1, -(-total // size))
        features, pre_filter, pre_transform, bounds = self.features, self.pre_filter, self.pre_transform, self.bounds

        def chunk(c: int) -> tuple[list[Data] | Columns, np.ndarray, dict[str, Any]]:
            rows = np.arange(c * size, min(total, (c + 1) * size))
            graphs, kept, bad = featurize_chunk(src.smiles, src.targets, rows, features, pre_transform, pre_filter,
                                                desc=f"{self.folder} chunk {c}", bounds=bounds)
            return graphs, kept, {"bad": [[int(r), s if isinstance(s, str) else repr(s), why] for r, s, why in bad]}

        def split_positions(rows: np.ndarray, reports: list[dict[str, Any]], counts: list[int]
                            ) -> dict[str, np.ndarray]:
            # Reports of chunks built before reasons were recorded hold (row, SMILES): RDKit could not parse those.
            bad = [(b[0], b[1], b[2] if len(b) > 2 else "RDKit cannot parse this SMILES")
                   for report in reports for b in report["bad"]]
            if bad and not self.skip_invalid:
                raise invalid_smiles_error(src.path, bad)
            if self.skip_invalid:
                write_skipped(self.report_path, bad)
            valid = np.ones(total, dtype=bool)
            valid[[r for r, _, _ in bad]] = False
            where = np.full(total, -1, dtype=np.int64)  # raw row -> position in the store (-1: skipped/filtered)
            where[rows] = np.arange(len(rows))
            split_rows = src.split_rows(valid) if callable(src.split_rows) else src.split_rows
            out = {}
            for split in self.splits:
                positions = where[np.asarray(split_rows[split], dtype=np.int64)]
                out[split] = positions[positions >= 0]
            return out

        plan = {"dataset": self.folder, "rows": total, "chunk_rows": size, "files": file_stamps(src.files),
                "key": osp.basename(self.processed_dir)}
        build_store(self.store_dir, num_chunks, chunk, plan, split_positions, desc=f"{self.folder}: build")

