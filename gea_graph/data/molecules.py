"""Molecular datasets: SMILES featurised with OGB's atom and bond features, or ZINC in the Benchmarking-GNNs encoding.

OGB features (every molecular dataset; ZINC with ``features="ogb"``): ``x`` ``[N, 9] long`` (``AtomEncoder``
applies), ``edge_attr`` ``[E, 3] long`` (``BondEncoder`` applies). The Benchmarking-GNNs encoding (ZINC's default,
``features="bench"``): ``x`` ``[N, 1] long`` in ``0..27`` (:data:`ZINC_ATOM_TYPES`), ``edge_attr`` ``[E, 1] long``
in ``1..3`` (:data:`ZINC_BOND_TYPES`); recipes embed them with ``node_encoder: embedding`` (``node_in: 1``,
``node_vocab: 28``) and ``edge_encoder: embedding`` (``edge_in: 1``, ``edge_vocab: 4``). Every graph also has
``edge_index`` ``[2, E]`` (both directions), ``y`` and ``smiles``. The stored SMILES is the one the graph was built
from, so atom ``i`` of ``Chem.MolFromSmiles(data.smiles)`` is node ``i`` (what per-atom pictures need).
"""

from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import os
import os.path as osp
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
from ogb.utils.features import allowable_features
from rdkit import Chem, RDLogger
from torch_geometric.data import Data
from torch_geometric.transforms import Compose

from gea_graph.data import safe_pickle
from gea_graph.data.base import CachedDataset, file_stamps
from gea_graph.data.config import PathLike
from gea_graph.data.download import RawFile, check_gzip, fetch, file_digest
from gea_graph.data.store import Columns, build_store, chunk_rows_for
from gea_graph.io import atomic_write, ensure_folder, extracted_zip, move_into
from gea_graph.transforms import RWPE, LapPE, ShortestPathDistance, apply_many

# What torch.load(weights_only=True) must admit to read OGB's split_dict.pt (numpy arrays of indices).
_NUMPY_SAFE_GLOBALS = [np.ndarray, np.dtype, np.dtypes.Int64DType, np.dtypes.Int32DType]
try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover
    from numpy.core.multiarray import _reconstruct
_NUMPY_SAFE_GLOBALS.append(_reconstruct)

GRAPHIUM = "https://raw.githubusercontent.com/datamol-io/graphium/2573628b14751178679cd4606a1523486585d873"


class InvalidSmilesError(ValueError):
    """RDKit cannot parse a SMILES of a dataset."""


class UnknownAtomTypeError(ValueError):
    """An atom (or bond) of a molecule is outside the featurisation's vocabulary (the Benchmarking-GNNs ZINC types,
    or a bond stereo OGB does not list). :attr:`reason` says what, in a few words (the message also names the
    molecule and the vocabulary)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


def _lookup(name: str, enum: type | None = None) -> tuple[dict, int]:
    """OGB's list ``allowable_features[name]`` as a dict value -> index (enum members where the list holds their
    names), and the index OGB's ``safe_index`` gives unlisted values (the last one)."""
    values = allowable_features[name]
    table = {}
    for i, value in enumerate(values):
        if value == "misc":
            continue
        table[getattr(enum, value) if enum is not None else value] = i
    return table, len(values) - 1


_ATOMIC_NUM = _lookup("possible_atomic_num_list")
_CHIRALITY = _lookup("possible_chirality_list", Chem.rdchem.ChiralType)
_DEGREE = _lookup("possible_degree_list")
_CHARGE = _lookup("possible_formal_charge_list")
_NUM_H = _lookup("possible_numH_list")
_RADICAL = _lookup("possible_number_radical_e_list")
_HYBRID = _lookup("possible_hybridization_list", Chem.rdchem.HybridizationType)
_BOND_TYPE = _lookup("possible_bond_type_list", Chem.rdchem.BondType)
_STEREO = _lookup("possible_bond_stereo_list", Chem.rdchem.BondStereo)


def mol_arrays(mol: Chem.Mol) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OGB's featurisation of an RDKit molecule: ``(x [N, 9], edge_index [2, E], edge_attr [E, 3])`` int64, the same
    arrays as ``ogb.utils.smiles2graph`` (checked in the tests), computed with dict look-ups and indexed atom access
    instead of OGB's ``list.index`` calls and RDKit's slow atom iterator."""
    atoms = []
    for a in range(mol.GetNumAtoms()):
        atom = mol.GetAtomWithIdx(a)
        atoms.append((
            _ATOMIC_NUM[0].get(atom.GetAtomicNum(), _ATOMIC_NUM[1]),
            _CHIRALITY[0].get(atom.GetChiralTag(), _CHIRALITY[1]),
            _DEGREE[0].get(atom.GetTotalDegree(), _DEGREE[1]),
            _CHARGE[0].get(atom.GetFormalCharge(), _CHARGE[1]),
            _NUM_H[0].get(atom.GetTotalNumHs(), _NUM_H[1]),
            _RADICAL[0].get(atom.GetNumRadicalElectrons(), _RADICAL[1]),
            _HYBRID[0].get(atom.GetHybridization(), _HYBRID[1]),
            int(atom.GetIsAromatic()),
            int(atom.IsInRing()),
        ))
    edges, feats = [], []
    for b in range(mol.GetNumBonds()):
        bond = mol.GetBondWithIdx(b)
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        # OGB's stereo look-up has no "misc" slot: an unlisted stereo is an error there and here.
        stereo = _STEREO[0].get(bond.GetStereo())
        if stereo is None:
            reason = f"bond {b} (atoms {i}-{j}) has stereo {bond.GetStereo()}, which OGB's features do not list"
            raise UnknownAtomTypeError(f"{reason} ({allowable_features['possible_bond_stereo_list']})", reason)
        feat = (_BOND_TYPE[0].get(bond.GetBondType(), _BOND_TYPE[1]), stereo, int(bond.GetIsConjugated()))
        edges += [(i, j), (j, i)]
        feats += [feat, feat]
    x = np.array(atoms, dtype=np.int64).reshape(-1, 9)
    edge_index = np.ascontiguousarray(np.array(edges, dtype=np.int64).reshape(-1, 2).T)
    return x, edge_index, np.array(feats, dtype=np.int64).reshape(-1, 3)


#: The 28 atom types of the Benchmarking-GNNs ZINC, in their index order (benchmarking-gnns issue #42, the TU Dortmund
#: ZINC README): element, then ``H<n>`` for an explicit hydrogen count, then the sign of a formal charge.
ZINC_ATOM_TYPES: tuple[str, ...] = (
    "C", "O", "N", "F", "C H1", "S", "Cl", "O -", "N H1 +", "Br", "N H3 +", "N H2 +", "N +", "N -", "S -", "I", "P",
    "O H1 +", "N H1 -", "O +", "S +", "P H1", "P H2", "C H2 -", "P +", "S H1 +", "C H1 -", "P H1 +")
#: Its bond types: ids of the kekulised molecule's bonds (``NONE`` = 0 is never stored: only bonds are edges).
ZINC_BOND_TYPES: tuple[str, ...] = ("NONE", "SINGLE", "DOUBLE", "TRIPLE")

_ZINC_ATOM_ID = {name: i for i, name in enumerate(ZINC_ATOM_TYPES)}
_ZINC_BOND_ID = {getattr(Chem.rdchem.BondType, name): i for i, name in enumerate(ZINC_BOND_TYPES) if i > 0}
# The hydrogen count inside an atom's SMILES bracket: "[C@@H]" -> "", "[NH3+]" -> "3"; no match: no H written.
_BRACKET_H = re.compile(r"^\[\d*[A-Z][a-z]?(?:@@|@(?:TH|AL|SP|TB|OH)?\d*)?H(\d*)")


def zinc_atom_type(atom: Chem.Atom) -> str:
    r"""The Benchmarking-GNNs ZINC type of an atom of a **kekulised** molecule: its element, then ``H<n>`` where
    :math:`n > 0` hydrogens are written in the atom's bracket when RDKit writes the kekulised molecule as SMILES, then
    ``+`` / ``-`` for a positive / negative formal charge (e.g. ``"C H1"`` for ``[C@H]``, ``"N H1 +"`` for ``[NH+]``
    and aromatic ``[nH+]``, plain ``"N"`` for aromatic ``[nH]``, which the kekulé SMILES writes ``N``). The name may
    lie outside :data:`ZINC_ATOM_TYPES`; :func:`zinc_mol_arrays` checks."""
    match = _BRACKET_H.match(atom.GetSmarts())  # GetSmarts of a parsed (non-query) atom: its SMILES token
    hydrogens = 0 if match is None else int(match.group(1) or 1)
    charge = atom.GetFormalCharge()
    return (atom.GetSymbol() + (f" H{hydrogens}" if hydrogens else "")
            + (" +" if charge > 0 else " -" if charge < 0 else ""))


def zinc_mol_arrays(mol: Chem.Mol, smiles: str = "") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Benchmarking-GNNs ZINC encoding of an RDKit molecule: ``(x [N, 1], edge_index [2, E], edge_attr [E, 1])``
    int64, with ``x`` the index of :func:`zinc_atom_type` in :data:`ZINC_ATOM_TYPES` and ``edge_attr`` the bond type
    of the kekulised molecule (1 single, 2 double, 3 triple). :obj:`mol` is kekulised in place.

    Raises :class:`UnknownAtomTypeError` naming :obj:`smiles` and the atom when an atom type or bond type is not in
    the vocabulary (there is no unknown bucket)."""
    Chem.Kekulize(mol, clearAromaticFlags=True)
    x = np.empty((mol.GetNumAtoms(), 1), dtype=np.int64)
    for a in range(mol.GetNumAtoms()):
        atom = mol.GetAtomWithIdx(a)
        name = zinc_atom_type(atom)
        if name not in _ZINC_ATOM_ID:
            raise UnknownAtomTypeError(
                f"{smiles!r}: atom {a} ({atom.GetSmarts()} in the kekulé SMILES) has type {name!r}, which is not one "
                f"of the 28 Benchmarking-GNNs ZINC atom types {list(ZINC_ATOM_TYPES)}; use features='ogb' for "
                f"molecules outside ZINC's vocabulary",
                f"atom {a} ({atom.GetSmarts()}) has type {name!r}, not one of the 28 ZINC atom types")
        x[a, 0] = _ZINC_ATOM_ID[name]
    edges, feats = [], []
    for b in range(mol.GetNumBonds()):
        bond = mol.GetBondWithIdx(b)
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        if bond.GetBondType() not in _ZINC_BOND_ID:
            reason = (f"bond {b} (atoms {i}-{j}) of the kekulised molecule is {bond.GetBondType()}, not one of "
                      f"SINGLE, DOUBLE, TRIPLE")
            raise UnknownAtomTypeError(f"{smiles!r}: {reason}", reason)
        edges += [(i, j), (j, i)]
        feats += [_ZINC_BOND_ID[bond.GetBondType()]] * 2
    edge_index = np.ascontiguousarray(np.array(edges, dtype=np.int64).reshape(-1, 2).T)
    return x, edge_index, np.array(feats, dtype=np.int64).reshape(-1, 1)


#: Featurisations by name: the ``features`` argument of :func:`featurize`.
FEATURES: dict[str, Callable] = {
    "ogb": lambda mol, smiles: mol_arrays(mol),
    "bench": zinc_mol_arrays,
}
#: Columns of ``x`` and ``edge_attr`` of each featurisation.
FEATURE_WIDTHS: dict[str, tuple[int, int]] = {"ogb": (9, 3), "bench": (1, 1)}


def _check_features(features: str) -> None:
    if features not in FEATURES:
        raise ValueError(f"features must be one of {', '.join(map(repr, FEATURES))}, got {features!r}")


def molecule_graphs(smiles: Sequence[object], targets: np.ndarray, rows: Sequence[int] | np.ndarray,
                    features: str = "ogb", refused: list[tuple[int, str]] | None = None
                    ) -> tuple[list[Data], np.ndarray, list[tuple[int, object]]]:
    """Graphs of rows :obj:`rows` of a SMILES list with ``y = targets[row]`` (``targets`` is ``[M, T]``; ``y`` of shape
    ``[1]`` when :math:`T = 1`, else ``[1, T]``), featurised by :obj:`features` (a key of :data:`FEATURES`).

    Returns ``(graphs, kept, bad)``: the graphs of the rows RDKit parses, their row numbers ``[G]``, and
    ``(row, SMILES)`` of the rows it cannot parse. A molecule outside the vocabulary raises, or is appended to
    :obj:`refused` as ``(row, reason)`` when that list is given. One process; datasets run it on chunks in
    parallel."""
    targets = np.asarray(targets, dtype=np.float32).reshape(len(smiles), -1)
    graphs, kept, bad = [], [], []
    for row, smi, arrays in _featurized(smiles, rows, features, bad, refused):
        x, edge_index, edge_attr = arrays
        y = torch.from_numpy(targets[row].copy() if targets.shape[1] == 1 else targets[row:row + 1].copy())
        graphs.append(Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(edge_index),
                           edge_attr=torch.from_numpy(edge_attr), y=y, smiles=smi, num_nodes=x.shape[0]))
        kept.append(row)
    return graphs, np.array(kept, dtype=np.int64), bad


def _featurized(smiles: Sequence[object], rows: Sequence[int] | np.ndarray, features: str,
                bad: list[tuple[int, object]], refused: list[tuple[int, str]] | None = None
                ) -> Iterator[tuple[int, str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """``(row, SMILES, (x, edge_index, edge_attr))`` of the rows RDKit parses, featurised by :obj:`features`; the
    ``(row, SMILES)`` of the others are appended to :obj:`bad`. A molecule outside the featurisation's vocabulary
    raises :class:`UnknownAtomTypeError`, or, with a :obj:`refused` list, is left out and appended to it as
    ``(row, reason)``."""
    _check_features(features)  # now, not at the first row
    RDLogger.DisableLog("rdApp.*")  # the InvalidSmilesError says more, once
    arrays = FEATURES[features]

    def parse() -> Iterator[tuple[int, str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        for row in np.asarray(rows, dtype=np.int64).tolist():
            smi = smiles[row]
            mol = Chem.MolFromSmiles(smi) if isinstance(smi, str) else None
            if mol is None:
                bad.append((row, smi))
                continue
            if refused is None:
                yield row, smi, arrays(mol, smi)
                continue
            try:
                out = arrays(mol, smi)
            except UnknownAtomTypeError as err:
                refused.append((row, err.reason))
                continue
            yield row, smi, out

    return parse()


#: The pre-transforms :func:`molecule_columns` applies on arrays: node-level positional encodings computed from
#: ``edge_index`` alone, and Graphormer's shortest paths.
COLUMN_TRANSFORMS = (LapPE, RWPE, ShortestPathDistance)


def column_transforms(transform: Callable | None) -> list | None:
    """The parts of a pre-transform (a :class:`~torch_geometric.transforms.Compose` is unrolled) when
    :func:`molecule_columns` can apply all of them (:data:`COLUMN_TRANSFORMS`), else :obj:`None`."""
    parts = [] if transform is None else list(transform.transforms) if isinstance(transform, Compose) else [transform]
    return parts if all(type(p) in COLUMN_TRANSFORMS for p in parts) else None


def molecule_columns(smiles: Sequence[object], targets: np.ndarray, rows: Sequence[int] | np.ndarray,
                     features: str = "ogb", transform: Callable | None = None,
                     refused: list[tuple[int, str]] | None = None
                     ) -> tuple[Columns, np.ndarray, list[tuple[int, object]]]:
    """What :func:`molecule_graphs` gives (and, with :obj:`transform`, that pre-transform on each graph: LapPE,
    RWPE, shortest paths or a ``Compose`` of them, see :func:`column_transforms`), as the store's columns directly:
    no :class:`~torch_geometric.data.Data` per molecule. Returns ``(columns, kept, bad)``; the store holds the same
    graphs either way (tested)."""
    parts = column_transforms(transform)
    if parts is None:
        raise ValueError(f"molecule_columns applies {[t.__name__ for t in COLUMN_TRANSFORMS]} only, not {transform!r}")
    targets = np.asarray(targets, dtype=np.float32).reshape(len(smiles), -1)
    xs, edges, attrs, texts, kept, bad = [], [], [], [], [], []
    for row, smi, (x, edge_index, edge_attr) in _featurized(smiles, rows, features, bad, refused):
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
                    refused: list[tuple[int, str]] | None = None, desc: str = "featurize"
                    ) -> tuple[list[Data] | Columns, np.ndarray, list[tuple[int, object]]]:
    """One chunk of a molecular dataset build: rows :obj:`rows` of :obj:`smiles` featurised by :obj:`features`,
    filtered by :obj:`pre_filter` and pre-transformed (the positional encodings of a ``pe`` spec) by
    :obj:`pre_transform`. This is the one featurisation path: the dataset build runs it on its chunks, and inference
    (:mod:`gea_graph.inference`) on the SMILES it is given, so a trained model sees new molecules exactly as it saw
    its training set.

    Returns ``(graphs, kept, bad)`` as :func:`molecule_graphs`: the graphs as store columns (without a pre-filter
    and with positional encodings and shortest paths only: no ``Data`` per molecule, see
    :func:`molecule_columns`) or as a list of ``Data``; their rows; the rows RDKit cannot parse. Molecules outside
    the vocabulary raise, or go to :obj:`refused` when given (see :func:`molecule_graphs`)."""
    if pre_filter is None and column_transforms(pre_transform) is not None:  # arrays straight into columns
        return molecule_columns(smiles, targets, rows, features, pre_transform, refused)
    graphs, kept, bad = molecule_graphs(smiles, targets, rows, features, refused)
    if pre_filter is not None:
        keep = [i for i, g in enumerate(graphs) if pre_filter(g)]
        graphs, kept = [graphs[i] for i in keep], kept[keep]
    return apply_many(pre_transform, graphs, desc=desc), kept, bad


def _invalid_smiles_error(source: str, bad: Sequence[tuple[int, object]]) -> InvalidSmilesError:
    row, smi = bad[0]
    return InvalidSmilesError(
        f"{source}: row {row} (0-based, header excluded) has a SMILES RDKit cannot parse: {smi!r}"
        f"{f' ({len(bad) - 1} more such rows)' if len(bad) > 1 else ''}. Fix or remove the row, or pass "
        f"skip_invalid=True to skip such rows (they are then listed in a report file).")


def _write_skipped(path: PathLike, bad: Sequence[tuple[int, object]]) -> None:
    ensure_folder(osp.dirname(osp.abspath(path)))
    with atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["row", "smiles"])
        writer.writerows(bad)


def featurize(smiles: Sequence[str], targets: np.ndarray, source: str, skip_invalid: bool = False,
              report_path: PathLike | None = None, features: str = "ogb") -> list[Data | None]:
    """Turns SMILES into graphs (see :func:`molecule_graphs`), one per row, in one process (datasets build in
    parallel chunks instead).

    A SMILES RDKit cannot parse raises :class:`InvalidSmilesError` naming its row and text. With
    :obj:`skip_invalid`, such rows become :obj:`None` in the output instead, and are listed (row, SMILES) in a CSV at
    :obj:`report_path`.
    """
    graphs, kept, bad = molecule_graphs(smiles, targets, np.arange(len(smiles)), features)
    if bad and not skip_invalid:
        raise _invalid_smiles_error(source, bad)
    if skip_invalid and report_path is not None:
        _write_skipped(report_path, bad)
    out: list[Data | None] = [None] * len(smiles)
    for row, graph in zip(kept.tolist(), graphs):
        out[row] = graph
    return out


def _first_non_utf8(path: str) -> str:
    """Where a file stops being UTF-8: ``byte 0xe9 on line 4`` (read only when pandas could not decode it)."""
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return f"byte {data[err.start]:#04x} on line {line}"
    return "an encoding error"


def _content_hash(path: str) -> str:
    """SHA-1 of a file's contents (part of a user file's cache key, so that an edited file is read again)."""
    return file_digest(path, "sha1")


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
    Option :obj:`skip_invalid`: see :func:`featurize`."""

    #: The featurisation (a key of :data:`FEATURES`); only :class:`ZINC` offers a choice.
    features: str = "ogb"
    #: Most rows of a build chunk (a worker's memory).
    chunk_rows: ClassVar[int] = 10_000

    def __init__(self, root: PathLike | None = None, split: str = "train", transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None,
                 pe: str | None = None, force_reload: bool = False, skip_invalid: bool = False) -> None:
        self.skip_invalid = skip_invalid
        super().__init__(root, split, transform, pre_transform, pre_filter, pe, force_reload)

    def cache_extra(self) -> str:
        return "skip_invalid" if self.skip_invalid else ""

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
        features, pre_filter, pre_transform = self.features, self.pre_filter, self.pre_transform

        def chunk(c: int) -> tuple[list[Data] | Columns, np.ndarray, dict[str, Any]]:
            rows = np.arange(c * size, min(total, (c + 1) * size))
            graphs, kept, bad = featurize_chunk(src.smiles, src.targets, rows, features, pre_transform, pre_filter,
                                                desc=f"{self.folder} chunk {c}")
            return graphs, kept, {"bad": [[int(r), s if isinstance(s, str) else repr(s)] for r, s in bad]}

        def split_positions(rows: np.ndarray, reports: list[dict[str, Any]], counts: list[int]
                            ) -> dict[str, np.ndarray]:
            bad = [tuple(b) for report in reports for b in report["bad"]]
            if bad and not self.skip_invalid:
                raise _invalid_smiles_error(src.path, bad)
            if self.skip_invalid:
                _write_skipped(self.report_path, bad)
            valid = np.ones(total, dtype=bool)
            valid[[r for r, _ in bad]] = False
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


class ZINC(_MoleculeDataset):
    r"""The ZINC 12k subset of the `"Benchmarking Graph Neural Networks" <https://arxiv.org/abs/2003.00982>`_
    suite (the graphs of PyG's ``ZINC(subset=True)``), built from its SMILES with RDKit.

    Features (:obj:`features`):

    - ``"bench"`` (default): the Benchmarking-GNNs encoding that every published ZINC number uses (GEAET, GFSA,
      GraphGPS, GRIT): ``x`` :math:`(N, 1)` long, the atom type in :data:`ZINC_ATOM_TYPES` (28 types: element,
      explicit hydrogens, charge; see :func:`zinc_atom_type`), and ``edge_attr`` :math:`(E, 1)` long, the bond type
      of the kekulised molecule (1 single, 2 double, 3 triple; 4 types with the unused 0). Embed them with
      ``node_encoder: embedding`` (``node_in: 1``, ``node_vocab: 28``) and ``edge_encoder: embedding``
      (``edge_in: 1``, ``edge_vocab: 4``). An atom outside the vocabulary raises :class:`UnknownAtomTypeError`.
    - ``"ogb"``: OGB's ``smiles2graph`` features (``x`` :math:`(N, 9)`, ``edge_attr`` :math:`(E, 3)` long) for
      ``AtomEncoder`` / ``BondEncoder``; richer than the papers' input, so not comparable with published MAEs.

    Target ``y`` :math:`(1)` float: ``score`` (constrained solubility, logP - SA). Splits from the official index
    file: 10,000 / 1,000 / 1,000, in that file's order. Each featurisation has its own processed cache.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
        features (str, optional): ``"bench"`` or ``"ogb"``. (default: :obj:`"bench"`)
    """

    folder = "zinc"
    raw_files = (
        RawFile("smiles_score.csv", f"{GRAPHIUM}/ZINC_bench_gnn/smiles_score.csv",
                "3dc7b381a35702966b23265bff925ad5", "zinc-subset"),
        RawFile("indexes_train_val_test.csv", f"{GRAPHIUM}/ZINC_bench_gnn/indexes_train_val_test.csv",
                "dd522702ed4b897c78ad0d98758cb55d", "zinc-subset"),
    )

    def __init__(self, root: PathLike | None = None, split: str = "train", transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None,
                 pe: str | None = None, force_reload: bool = False, skip_invalid: bool = False,
                 features: str = "bench") -> None:
        _check_features(features)
        self.features = features
        super().__init__(root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid)

    def cache_extra(self) -> str:
        # The features are part of the key, so caches of one encoding are never read as the other.
        return "|".join(filter(None, [super().cache_extra(), f"features={self.features}"]))

    def source(self) -> MoleculeSource:
        path = self.raw_path("smiles_score.csv")
        table = pd.read_csv(path)
        index_path = self.raw_path("indexes_train_val_test.csv")
        index = pd.read_csv(index_path)
        return MoleculeSource(table["SMILES"].tolist(), table[["score"]].to_numpy(), path,
                              {split: index[split].dropna().to_numpy(dtype=np.int64) for split in self.splits},
                              files=(path, index_path))


LRGB_PEPTIDES = "https://www.dropbox.com/s"


class _Peptides(_MoleculeDataset):
    csv_file: RawFile
    split_file: RawFile

    def targets(self, table: pd.DataFrame) -> np.ndarray:
        raise NotImplementedError

    def source(self) -> MoleculeSource:
        path = self.raw_path(self.csv_file.name)
        check_gzip(path)
        table = pd.read_csv(path)
        split_path = self.raw_path(self.split_file.name)
        index = safe_pickle.load(split_path)
        return MoleculeSource(table["smiles"].tolist(), self.targets(table), path,
                              {split: np.asarray(index[split], dtype=np.int64) for split in self.splits},
                              files=(path, split_path))


class PeptidesFunctional(_Peptides):
    r"""Peptides-func from the `"Long Range Graph Benchmark" <https://arxiv.org/abs/2206.08164>`_: 15,535 peptides,
    10-way multi-label classification (average precision).

    Target ``y`` :math:`(1, 10)` float (0/1). Split 10,873 / 2,331 / 2,331 from LRGB's stratified split pickle,
    read with :mod:`gea_graph.data.safe_pickle`.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    folder = "peptides-func"
    csv_file = RawFile("peptide_multi_class_dataset.csv.gz",
                       f"{LRGB_PEPTIDES}/ol2v01usvaxbsr8/peptide_multi_class_dataset.csv.gz?dl=1",
                       "701eb743e899f4d793f0e13c8fa5a1b4", "peptides-func")
    split_file = RawFile("splits_random_stratified_peptide.pickle",
                         f"{LRGB_PEPTIDES}/j4zcnx2eipuo0xz/splits_random_stratified_peptide.pickle?dl=1",
                         "5a0114bdadc80b94fc7ae974f13ef061", "peptides-func")
    raw_files = (csv_file, split_file)

    def targets(self, table: pd.DataFrame) -> np.ndarray:
        # The labels column holds Python list literals such as "[0, 1, 0, ...]".
        return np.array([ast.literal_eval(text) for text in table["labels"]], dtype=np.float32)


class PeptidesStructural(_Peptides):
    r"""Peptides-struct from the `"Long Range Graph Benchmark" <https://arxiv.org/abs/2206.08164>`_: the same 15,535
    peptides, 11 regression targets of their 3D shape (mean absolute error).

    Target ``y`` :math:`(1, 11)` float: the columns :attr:`target_names` of LRGB's standardised file (zero mean, unit
    variance), in that order. Split 10,873 / 2,331 / 2,331.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    folder = "peptides-struct"
    target_names = ("Inertia_mass_a", "Inertia_mass_b", "Inertia_mass_c", "Inertia_valence_a", "Inertia_valence_b",
                    "Inertia_valence_c", "length_a", "length_b", "length_c", "Spherocity", "Plane_best_fit")
    csv_file = RawFile("peptide_structure_normalized_dataset.csv.gz",
                       f"{LRGB_PEPTIDES}/0d4aalmq4b4e2nh/peptide_structure_normalized_dataset.csv.gz?dl=1",
                       "c240c1c15466b5c907c63e180fa8aa89", "peptides-struct")
    split_file = RawFile("splits_random_stratified_peptide_structure.pickle",
                         f"{LRGB_PEPTIDES}/9dfifzft1hqgow6/splits_random_stratified_peptide_structure.pickle?dl=1",
                         "5a0114bdadc80b94fc7ae974f13ef061", "peptides-struct")
    raw_files = (csv_file, split_file)

    def targets(self, table: pd.DataFrame) -> np.ndarray:
        missing = [name for name in self.target_names if name not in table.columns]
        if missing:
            raise ValueError(f"{self.csv_file.name} lacks target columns {missing}; is it LRGB's Peptides-struct file?")
        return table[list(self.target_names)].to_numpy(dtype=np.float32)


class _OGBLSCMolecules(_MoleculeDataset):
    """An OGB-LSC HOMO-LUMO gap dataset in OGB's raw layout: ``root/<folder>/raw/data.csv.gz`` (columns idx,
    smiles, homolumogap) and ``root/<folder>/split_dict.pt`` (OGB split name -> index array)."""

    ogb_split_names: ClassVar[dict[str, str]]
    archive: RawFile

    @classmethod
    def _canonical_split(cls, split: str) -> str:
        return super()._canonical_split("val" if split == "valid" else split)

    @property
    def raw_file_names(self) -> list[str]:
        return ["data.csv.gz"]

    @property
    def split_dict_path(self) -> str:
        return osp.join(self.root, self.folder, "split_dict.pt")

    def download(self) -> None:
        archive = fetch(self.archive, self.root)
        with extracted_zip(archive, self.root) as tmp:
            inside = osp.join(tmp, self.folder)
            ensure_folder(osp.join(self.root, self.folder))
            for name in os.listdir(inside):  # raw/ and split_dict.pt, beside any processed/ caches
                move_into(osp.join(inside, name), osp.join(self.root, self.folder, name))
        os.unlink(archive)

    def source(self) -> MoleculeSource:
        path = osp.join(self.raw_dir, "data.csv.gz")
        check_gzip(path)
        # Only the two columns used (OGB's file has a third, idx): at 3.8M rows the rest is memory for nothing.
        table = pd.read_csv(path, usecols=["smiles", "homolumogap"], dtype={"smiles": str})
        # weights_only: a split file can never run code; OGB stores numpy index arrays (admitted) or tensors.
        with torch.serialization.safe_globals(_NUMPY_SAFE_GLOBALS):
            split_dict = torch.load(self.split_dict_path, weights_only=True)
        missing = [name for name in self.ogb_split_names.values() if name not in split_dict]
        if missing:
            raise ValueError(f"{self.split_dict_path} lacks the split(s) {missing} (it has {sorted(split_dict)}); "
                             f"is it OGB's split file of {type(self).__name__}?")
        return MoleculeSource(table["smiles"].tolist(), table[["homolumogap"]].to_numpy(), path,
                              {split: np.asarray(split_dict[self.ogb_split_names[split]], dtype=np.int64)
                               for split in self.splits}, files=(path, self.split_dict_path))


class PCQM4Mv2(_OGBLSCMolecules):
    r"""PCQM4Mv2 from the `"OGB-LSC" <https://arxiv.org/abs/2103.09430>`_ challenge: 3,746,620 molecules, HOMO-LUMO
    gap regression (eV, mean absolute error), in OGB's raw layout::

        root/pcqm4m-v2/raw/data.csv.gz   columns idx, smiles, homolumogap
        root/pcqm4m-v2/split_dict.pt     {"train", "valid", "test-dev", "test-challenge"} -> index arrays

    A folder already in that layout is used as it is; otherwise OGB's zip is taken from the mirror
    (``$GEA_GRAPH_MIRROR/pcqm4mv2/pcqm4m-v2.zip``) or downloaded. ``split_dict.pt`` is read with
    ``torch.load(weights_only=True)`` (numpy arrays admitted).

    Splits: ``train``, ``val`` (OGB's ``valid``), ``test-dev``, ``test-challenge``. The last two have no public
    labels: their ``y`` is NaN. (GraphGPS reports OGB's ``valid`` as its test set.) Target ``y`` :math:`(1)`.
    Featurised by OGB's ``smiles2graph`` (``x`` :math:`(N, 9)`, ``edge_attr`` :math:`(E, 3)` long).

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    folder = "pcqm4m-v2"
    splits = ("train", "val", "test-dev", "test-challenge")
    ogb_split_names: ClassVar[dict[str, str]] = {"train": "train", "val": "valid", "test-dev": "test-dev",
                                                 "test-challenge": "test-challenge"}
    archive = RawFile("pcqm4m-v2.zip", "http://ogb-stanford-dataset.s3.amazonaws.com/data/lsc/pcqm4m-v2.zip",
                      None, "pcqm4mv2")


class PCQM4M(_OGBLSCMolecules):
    r"""PCQM4M (v1, "PCQM4M-LSC") from the `"OGB-LSC" <https://arxiv.org/abs/2103.09430>`_ challenge of KDD Cup 2021:
    3,803,453 molecules, HOMO-LUMO gap regression (eV, mean absolute error); the dataset of the GFSA paper's PCQM4M
    column. OGB's raw layout::

        root/pcqm4m_kddcup2021/raw/data.csv.gz   columns idx, smiles, homolumogap
        root/pcqm4m_kddcup2021/split_dict.pt     {"train", "valid", "test"} -> index arrays

    A folder already in that layout is used as it is; otherwise OGB's zip ``pcqm4m_kddcup2021.zip`` is taken from the
    mirror (``$GEA_GRAPH_MIRROR/pcqm4m/``) or downloaded from the URL OGB uses, and checked against the MD5 that OGB's
    source records for it. ``split_dict.pt`` is read with ``torch.load(weights_only=True)`` only.

    Splits: ``train`` (3,045,360), ``val`` (OGB's ``valid``, 380,670), ``test`` (377,423, no public labels: ``y`` is
    NaN). Papers report the ``valid`` MAE. Target ``y`` :math:`(1)`. Featurised like :class:`PCQM4Mv2` (OGB's
    ``smiles2graph``).

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    folder = "pcqm4m_kddcup2021"
    splits = ("train", "val", "test")
    ogb_split_names: ClassVar[dict[str, str]] = {"train": "train", "val": "valid", "test": "test"}
    # The URL of ogb.lsc.PygPCQM4MDataset (ogb 1.3.6); the MD5 is the one OGB's source gives for this zip.
    archive = RawFile("pcqm4m_kddcup2021.zip",
                      "https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m_kddcup2021.zip",
                      "5144ebaa7c67d24da1a2acbe41f57f6a", "pcqm4m")


class MoleculeCSV(_MoleculeDataset):
    r"""Any CSV of SMILES and targets, featurised like the benchmarks (OGB features, same PEs), with no code edits.

    Target ``y`` float from :obj:`target_columns`, :math:`(1)` for one column, else :math:`(1, T)`. Empty cells
    (and ``NaN``) are missing targets, kept as NaN and masked per target by the training losses and metrics;
    infinite or non-numeric cells are refused, naming the file, column and rows. Without
    :obj:`split_column`, a seeded split: ``"random"`` shuffles rows, ``"scaffold"`` groups rows by Bemis-Murcko
    scaffold and fills train with the largest scaffold groups first (so test molecules have unseen scaffolds).
    With :obj:`split_column`, its values name each row's split (``train``, ``val``/``valid``, ``test``). A SMILES
    that occurs in more than one split is reported with a warning (the same molecule in train and test).

    The processed cache lives in ``root/csv-<file stem>-<hash of the path, the file's contents and the options>/``:
    editing the file gives a new cache, never the old targets.

    Args:
        root (str, optional): Data root.
        path (str): The CSV file (``.csv`` or ``.csv.gz``).
        smiles_column (str): Column holding SMILES.
        target_columns (str or list of str): Target column(s).
        split_column (str, optional): Column naming each row's split. (default: :obj:`None`)
        split (str): Which split to load. (default: :obj:`"train"`)
        split_method (str, optional): ``"random"`` or ``"scaffold"`` when there is no split column.
            (default: :obj:`"random"`)
        split_fractions (tuple, optional): Train / val / test fractions. (default: :obj:`(0.8, 0.1, 0.1)`)
        seed (int, optional): Seed of the split. (default: :obj:`0`)
        transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    def __init__(self, root: PathLike | None, path: PathLike, smiles_column: str,
                 target_columns: str | Sequence[str], split_column: str | None = None, split: str = "train",
                 split_method: str = "random", split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
                 seed: int = 0, transform: Callable | None = None, pre_transform: Callable | None = None,
                 pre_filter: Callable | None = None, pe: str | None = None, force_reload: bool = False,
                 skip_invalid: bool = False) -> None:
        if split_method not in ("random", "scaffold"):
            raise ValueError(f"split_method must be 'random' or 'scaffold', got {split_method!r}")
        if not osp.isfile(path):
            raise FileNotFoundError(f"MoleculeCSV: no file at {path}")
        fractions = tuple(float(f) for f in split_fractions)
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
            raise ValueError(f"split_fractions {tuple(split_fractions)!r} is not allowed: give three fractions "
                             f"(train, val, test), each >= 0, summing to 1, e.g. (0.8, 0.1, 0.1)")
        self.path = osp.abspath(path)
        self.smiles_column = smiles_column
        self.target_columns = [target_columns] if isinstance(target_columns, str) else list(target_columns)
        self.split_column = split_column
        self.split_method = split_method
        self.split_fractions = tuple(split_fractions)
        self.seed = seed
        stem = osp.basename(self.path).split(".")[0]
        key = repr((self.path, _content_hash(self.path), smiles_column, self.target_columns, split_column,
                    split_method, self.split_fractions, seed))
        self.folder = f"csv-{stem}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"
        super().__init__(root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid)

    @property
    def raw_dir(self) -> str:
        return osp.dirname(self.path)

    @property
    def raw_file_names(self) -> list[str]:
        return [osp.basename(self.path)]

    def download(self) -> None:  # the user's file is checked to exist in __init__
        pass

    def source(self) -> MoleculeSource:
        if self.path.endswith(".gz"):
            check_gzip(self.path)
        try:
            header = pd.read_csv(self.path, header=None, nrows=1, dtype=str).iloc[0].tolist()
            table = pd.read_csv(self.path)
        except pd.errors.EmptyDataError:
            raise ValueError(f"{self.path} is empty: expected a header line naming the columns, then one row per "
                             f"molecule") from None
        except pd.errors.ParserError as err:
            raise ValueError(f"{self.path} is not a readable CSV file: {str(err).strip()}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{self.path} is not UTF-8 text ({_first_non_utf8(self.path)}); save it as UTF-8") \
                from None
        twice = sorted({str(name) for name in header if header.count(name) > 1})
        if twice:  # pandas would rename the second one (y.1) and read the first without a word
            raise ValueError(f"{self.path} names the column(s) {twice} more than once in its header "
                             f"{[str(h) for h in header]}; column names must be unique")
        missing = [c for c in [self.smiles_column, *self.target_columns, self.split_column]
                   if c is not None and c not in table.columns]
        if missing:
            raise ValueError(f"{self.path} has no column(s) {missing}; its columns are {list(table.columns)}")
        if len(table) == 0:
            raise ValueError(f"{self.path} has a header but no rows: expected one row per molecule")
        smiles = table[self.smiles_column].tolist()
        targets = self._targets(table)
        if self.split_column is not None:
            names = table[self.split_column].astype(str).str.strip().str.lower().replace({"valid": "val"})
            unknown = sorted(set(names) - set(self.splits))
            if unknown:
                raise ValueError(f"{self.path}: column {self.split_column!r} has values {unknown}; expected "
                                 f"train, val (or valid), test")
            index = {split: np.flatnonzero(names.to_numpy() == split) for split in self.splits}
        elif self.split_method == "random":
            index = self._random_split(len(table))
        else:
            # The scaffold groups are those of the rows RDKit parses, known once the rows are featurised.
            def scaffold_rows(valid: np.ndarray) -> dict[str, np.ndarray]:
                index = self._scaffold_split([smi if ok else None for smi, ok in zip(smiles, valid.tolist())])
                self._warn_duplicates(smiles, index)
                return index

            return MoleculeSource(smiles, targets, self.path, scaffold_rows, files=(self.path,))
        self._warn_duplicates(smiles, index)
        return MoleculeSource(smiles, targets, self.path, index, files=(self.path,))

    def _targets(self, table: pd.DataFrame) -> np.ndarray:
        """The target columns as float32 ``[rows, T]``: empty cells are NaN (missing), text and infinities are
        refused naming the column and rows (0-based, header excluded)."""
        columns = []
        for name in self.target_columns:
            raw = table[name]
            values = pd.to_numeric(raw, errors="coerce")
            bad = np.flatnonzero(values.isna().to_numpy() & raw.notna().to_numpy()
                                 & (raw.astype(str).str.strip().str.lower() != "nan").to_numpy())
            if len(bad):
                raise ValueError(f"{self.path}: target column {name!r} has non-numeric values in rows "
                                 f"{bad[:5].tolist()} (0-based, header excluded), e.g. {raw.iloc[bad[0]]!r}; "
                                 f"allowed: numbers, or an empty cell for a missing target")
            infinite = np.flatnonzero(np.isinf(values.to_numpy(dtype=np.float64)))
            if len(infinite):
                raise ValueError(f"{self.path}: target column {name!r} is infinite in rows {infinite[:5].tolist()} "
                                 f"(0-based, header excluded); allowed: finite numbers, or an empty cell for a "
                                 f"missing target")
            columns.append(values.to_numpy(dtype=np.float32))
        return np.stack(columns, axis=1)

    def _warn_duplicates(self, smiles: Sequence[object], index: dict[str, np.ndarray]) -> None:
        where: dict[str, dict[str, list[int]]] = {}
        for split, rows in index.items():
            for row in rows.tolist():
                where.setdefault(str(smiles[row]).strip(), {}).setdefault(split, []).append(row)
        shared = {smi: found for smi, found in where.items() if len(found) > 1}
        if shared:
            smi, found = next(iter(shared.items()))
            example = ", ".join(f"{split} row(s) {rows[:3]}" for split, rows in found.items())
            warnings.warn(f"{self.path}: {len(shared)} SMILES occur in more than one split, e.g. {smi!r} in "
                          f"{example} (0-based, header excluded): the same molecule is trained on and evaluated. "
                          f"Remove duplicate rows, or use split_method='scaffold' (which keeps them together).",
                          stacklevel=3)

    def _sizes(self, n: int) -> tuple[int, int]:
        n_train = round(self.split_fractions[0] * n)
        n_val = round(self.split_fractions[1] * n)
        return n_train, n_val

    def _random_split(self, n: int) -> dict[str, np.ndarray]:
        perm = np.random.default_rng(self.seed).permutation(n)
        n_train, n_val = self._sizes(n)
        return {"train": perm[:n_train], "val": perm[n_train:n_train + n_val], "test": perm[n_train + n_val:]}

    def _scaffold_split(self, smiles: Sequence[str | None]) -> dict[str, np.ndarray]:
        from rdkit.Chem.Scaffolds import MurckoScaffold

        groups: dict[str, list[int]] = {}
        for row, smi in enumerate(smiles):
            if smi is not None:
                groups.setdefault(MurckoScaffold.MurckoScaffoldSmiles(smiles=smi), []).append(row)
        # Largest groups first, ties broken by a seeded shuffle, then greedy filling of train, val, test.
        order = list(groups.values())
        np.random.default_rng(self.seed).shuffle(order)
        order.sort(key=len, reverse=True)
        n_train, n_val = self._sizes(len(smiles))
        out: dict[str, list[int]] = {"train": [], "val": [], "test": []}
        for rows in order:
            if len(out["train"]) + len(rows) <= n_train:
                out["train"] += rows
            elif len(out["val"]) + len(rows) <= n_val:
                out["val"] += rows
            else:
                out["test"] += rows
        return {k: np.array(sorted(v), dtype=np.int64) for k, v in out.items()}
