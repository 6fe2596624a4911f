r"""How a dataset's graphs are made, as a record that travels with a trained model.

A :class:`Featurizer` names the featurisation of a recipe's ``data`` section: whether its graphs come from SMILES
(the molecular datasets and user CSVs) or not (superpixels, generated trees, a dataset class of the user's), the
feature mode (``"ogb"``: OGB's ``smiles2graph`` features; ``"bench"``: the 28 Benchmarking-GNNs ZINC types), that
mode's vocabulary, and the positional-encoding spec (``data.pe``). Training records it in every checkpoint
(:func:`Featurizer.to_dict`, plain JSON types), and inference rebuilds it (:func:`Featurizer.from_dict`), so new
molecules are featurised exactly as the training set was, by the very code that built it
(:func:`gea_graph.data.featurizers.featurize_chunk`), and read through a store exactly as training read them
(:meth:`gea_graph.data.GraphStore.from_columns`).

A record names no file and no class to import: where graphs are read from stays the caller's choice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch_geometric.data import Dataset

from gea_graph.data.config import PathLike
from gea_graph.data.featurizers import FEATURES, SizeBounds, featurize_chunk
from gea_graph.data.featurizers.molecule import VOCABULARY_NAMES
from gea_graph.data.molecules import _MoleculeDataset
from gea_graph.data.store import Columns, GraphStore, graphs_to_columns
from gea_graph.data.zinc import ZINC
from gea_graph.transforms import parse_pe

#: Version of the record written by :meth:`Featurizer.to_dict`.
FEATURIZER_FORMAT = 1

#: SMILES per featurisation chunk when a caller does not choose (the dataset builds' default chunk size).
CHUNK_ROWS = 10_000


def vocabulary(features: str) -> dict[str, list[Any]]:
    r"""The vocabulary of a feature mode, as JSON types: the 28 atom and 4 bond types of ``"bench"``, OGB's
    ``allowable_features`` lists of ``"ogb"``. A checkpoint records it; a model trained on one vocabulary is never fed
    another (:meth:`Featurizer.from_dict` compares them)."""
    if features in FEATURES:
        return FEATURES[features].vocabulary()
    raise ValueError(f"features must be one of {', '.join(map(repr, FEATURES))}, got {features!r}")


class FeaturizerError(ValueError):
    r"""A featurisation record that this installation cannot reproduce, or inputs it cannot featurise (the message
    says which and why, in one line)."""


@dataclass
class Featurized:
    r"""A chunk of inputs featurised for a model: the graphs of the valid inputs in a store held in memory, their
    positions among the inputs (``rows``, ascending), and a reason for every other position (``errors``)."""

    store: GraphStore | None
    rows: np.ndarray
    errors: dict[int, str] = field(default_factory=dict)

    def batch(self, positions: Sequence[int] | np.ndarray):
        r"""Graphs ``positions`` (indices into :attr:`rows`) as one PyG ``Batch``."""
        assert self.store is not None
        return self.store.batch(np.asarray(positions, dtype=np.int64))

    def num_nodes(self) -> np.ndarray | None:
        r"""The node count of every graph (``[len(rows)]``), when the graphs' store can tell without building them."""
        if isinstance(self.store, GraphStore):
            return np.asarray(self.store.num_nodes, dtype=np.int64)
        sizes = getattr(self.store, "num_nodes_per_graph", None)
        return sizes() if callable(sizes) else None


@dataclass(frozen=True)
class Featurizer:
    r"""The featurisation of a recipe's data (see the module docstring).

    Args:
        inputs: ``"smiles"`` (graphs made from SMILES) or ``"graphs"`` (graphs that do not come from SMILES).
        dataset: The built-in dataset's name, ``"csv"`` (a user's molecule CSV) or ``"class"`` (a dataset class).
        features: The feature mode (a key of :data:`gea_graph.data.featurizers.FEATURES`) for SMILES inputs.
        pe: The positional-encoding spec (:func:`gea_graph.transforms.parse_pe`), or :obj:`None`.
        options: The dataset options that change its graphs (ZINC's ``features``), to rebuild the dataset.
        refuses_smiles: Why SMILES cannot be featurised, for ``inputs="graphs"``.
    """

    inputs: str
    dataset: str
    features: str | None = None
    pe: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    refuses_smiles: str | None = None

    # -- from a recipe's data section ---------------------------------------------------------------------------
    @classmethod
    def of_data(cls, name: str | None = None, csv: str | None = None, dataset_class: str | None = None,
                options: Mapping[str, Any] | None = None, pe: str | None = None) -> Featurizer:
        r"""The featurisation of a data section: exactly one of a built-in dataset :obj:`name`, a molecule
        :obj:`csv` or a :obj:`dataset_class` (its dotted path), with the section's :obj:`options` and :obj:`pe`."""
        from gea_graph.data import DATASETS

        options = dict(options or {})
        if name is not None:
            key = name.lower()
            if key not in DATASETS:
                raise FeaturizerError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
            info = DATASETS[key]
            if issubclass(info.cls, _MoleculeDataset):
                features = str(options.get("features", "bench" if info.cls is ZINC else info.cls.features))
                kept = {"features": features} if info.cls is ZINC else {}
                return cls("smiles", key, features, pe, kept)
            why = {"pascalvoc-sp": "PascalVOC-SP graphs are superpixels of images",
                   "coco-sp": "COCO-SP graphs are superpixels of images",
                   "pcqm-contact": "LRGB ships PCQM-Contact as graphs with contact labels, without SMILES"}
            reason = why.get(key, f"{key} graphs are generated trees (TreeNeighbourMatch), not molecules")
            return cls("graphs", key, None, pe, {}, reason)
        if csv is not None:
            return cls("smiles", "csv", "ogb", pe)
        return cls("graphs", "class", None, pe, {},
                   f"its graphs are made by the dataset class {dataset_class}, not from SMILES")

    # -- the record ---------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        r"""The record a checkpoint keeps (JSON types): these fields, the format and the feature mode's
        vocabulary."""
        return {"format": FEATURIZER_FORMAT, "inputs": self.inputs, "dataset": self.dataset,
                "features": self.features, "pe": self.pe, "options": dict(self.options),
                "refuses_smiles": self.refuses_smiles,
                "vocabulary": vocabulary(self.features) if self.features is not None else None}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any], where: str = "the checkpoint") -> Featurizer:
        r"""The featurisation a record describes, checked against this installation: its format, feature mode,
        PE spec and vocabulary must be ones this code reproduces exactly.

        Raises:
            FeaturizerError: naming :obj:`where`, the field and both values.
        """
        if not isinstance(record, Mapping):
            raise FeaturizerError(f"{where}: its featuriser record is a {type(record).__name__}, not a mapping")
        fmt = record.get("format")
        if fmt != FEATURIZER_FORMAT:
            raise FeaturizerError(f"{where}: its featuriser record has format {fmt!r}; this gea-graph reads format "
                                  f"{FEATURIZER_FORMAT}")
        inputs, features = record.get("inputs"), record.get("features")
        if inputs not in ("smiles", "graphs"):
            raise FeaturizerError(f"{where}: featuriser inputs {inputs!r} is not one of 'smiles', 'graphs'")
        if inputs == "smiles" and features not in FEATURES:
            raise FeaturizerError(f"{where}: feature mode {features!r} is not one of {', '.join(FEATURES)}")
        pe = record.get("pe")
        try:
            parse_pe(pe)
        except ValueError as err:
            raise FeaturizerError(f"{where}: its PE spec cannot be read here: {err}") from None
        if features is not None and record.get("vocabulary") != vocabulary(features):
            raise FeaturizerError(f"{where}: its {features!r} vocabulary differs from this installation's, so its "
                                  f"inputs cannot be featurised as in training (installed ogb or gea-graph differ "
                                  f"from the ones it was trained with)")
        options = record.get("options") or {}
        if set(options) - {"features"}:
            raise FeaturizerError(f"{where}: featuriser options {sorted(options)} are not allowed; only 'features'")
        return cls(inputs, str(record.get("dataset")), features, pe, dict(options), record.get("refuses_smiles"))

    # -- featurising ----------------------------------------------------------------------------------------------
    def check_smiles(self) -> None:
        r"""Raises :class:`FeaturizerError` (one line, saying why) when this featurisation cannot take SMILES."""
        if self.inputs != "smiles":
            raise FeaturizerError(f"this model cannot take SMILES: it was trained on {self.dataset} "
                                  f"({self.refuses_smiles}); give it graphs of that dataset instead")

    def featurize(self, smiles: Sequence[object], bounds: SizeBounds | None = None) -> Featurized:
        r"""Graphs of :obj:`smiles` exactly as the dataset build makes them (same featurisation, same PEs, read
        through a store). Inputs that are not SMILES strings (or are blank), hold whitespace inside, exceed
        :obj:`bounds` (default :class:`~gea_graph.data.featurizers.SizeBounds`), cannot be parsed by RDKit or lie
        outside the vocabulary get a reason in :attr:`Featurized.errors` instead of a graph."""
        self.check_smiles()
        refused: list[tuple[int, str]] = []
        graphs, kept, bad = featurize_chunk(smiles, np.zeros((len(smiles), 1), np.float32), np.arange(len(smiles)),
                                            self.features, parse_pe(self.pe), refused=refused, bounds=bounds)
        errors = {row: reason for row, _, reason in bad}
        for row, reason in refused:
            errors[row] = f"outside the model's vocabulary ({VOCABULARY_NAMES[self.features]}): {reason}"
        columns = graphs if isinstance(graphs, Columns) else graphs_to_columns(graphs)
        return Featurized(GraphStore.from_columns(columns) if len(kept) else None, kept, errors)

    def describe(self) -> str:
        r"""One line: the dataset, the inputs, the feature mode and the PE spec."""
        made = f"SMILES with {self.features!r} features" if self.inputs == "smiles" else "graphs (not from SMILES)"
        return f"{self.dataset}: {made}, PE {self.pe or 'none'}"

    def load_dataset(self, split: str, root: PathLike | None = None, name: str | None = None) -> Dataset:
        r"""Split :obj:`split` of a built-in dataset made with this featurisation (feature mode, PE spec), built or
        read from its cache in the data root :obj:`root` (default ``$GEA_GRAPH_DATA``, else ``./datasets``): the
        dataset this record describes, or another one, :obj:`name`, whose graphs can be made the same way (another
        molecular dataset in the same feature mode).

        Raises:
            FeaturizerError: when :obj:`name` cannot be made this way, or this record names no built-in dataset.
        """
        from gea_graph.data import DATASETS, get_dataset

        target = self.dataset if name is None else name.lower()
        if target not in DATASETS:
            raise FeaturizerError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}"
                                  if name is not None else
                                  "this model was trained on "
                                  f"{'a CSV file' if self.dataset == 'csv' else 'a dataset class'}"
                                  f", not a built-in dataset: give its inputs as SMILES or graphs")
        options = self.options
        if target != self.dataset:
            zinc = DATASETS[target].cls is ZINC and self.features is not None
            other = Featurizer.of_data(name=target, options={"features": self.features} if zinc else {}, pe=self.pe)
            if self.inputs != "smiles" or other.inputs != "smiles" or other.features != self.features:
                raise FeaturizerError(f"the model was trained on {self.describe()}; {other.describe()} cannot be "
                                      f"fed to it")
            options = other.options
        return get_dataset(target, root=root, split=split, pe=self.pe, **options)


def target_names(name: str | None, csv_options: Mapping[str, Any] | None, out_channels: int) -> list[str]:
    r"""What the :obj:`out_channels` outputs of a model are called: the target columns of a user's CSV
    (``data.options.target_columns``), else the names on the built-in dataset's card (targets, labels or classes;
    :attr:`gea_graph.data.DatasetInfo.target_names`), else ``target_0``, ``target_1``, ..."""
    from gea_graph.data import DATASETS

    names: Sequence[str] = ()
    if csv_options is not None:
        columns = csv_options.get("target_columns")
        names = [columns] if isinstance(columns, str) else list(columns or ())
    elif name is not None and name.lower() in DATASETS:
        names = DATASETS[name.lower()].target_names
    if len(names) != out_channels:
        return [f"target_{i}" for i in range(out_channels)]
    return [str(n) for n in names]


def chunk_rows() -> int:
    r"""SMILES per featurisation chunk: ``$GEA_GRAPH_CHUNK_ROWS`` (the dataset builds' setting), else
    :data:`CHUNK_ROWS`."""
    size = int(os.environ.get("GEA_GRAPH_CHUNK_ROWS", CHUNK_ROWS))
    if size < 1:
        raise ValueError(f"GEA_GRAPH_CHUNK_ROWS must be a positive number of rows, got {size}")
    return size
