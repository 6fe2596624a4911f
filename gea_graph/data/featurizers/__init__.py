r"""Featurisation: atoms, bonds and molecules to integer columns (Chemprop-style featurisers), the size bounds of an
input, and the one path from SMILES rows to graphs with positional encodings.

- :mod:`.base`: the protocols (:class:`ColumnFeaturizer`, :class:`GraphFeaturizer`) and the errors;
- :mod:`.atom`, :mod:`.bond`: OGB's features and the Benchmarking-GNNs ZINC types, each docstring mapping the
  columns to features;
- :mod:`.molecule`: :class:`MolGraphFeaturizer`, the feature modes :data:`FEATURES` (``"ogb"``, ``"bench"``) and
  :class:`SizeBounds` with :func:`read_smiles`;
- :mod:`.graphs`: :func:`featurize_chunk` and friends.

Every graph has ``x`` ``[N, A] long``, ``edge_index`` ``[2, E]`` (both directions), ``edge_attr`` ``[E, B] long``,
``y`` and ``smiles``. The stored SMILES is the one the graph was built from, so atom ``i`` of
``Chem.MolFromSmiles(data.smiles)`` is node ``i`` (what per-atom pictures need).
"""

from gea_graph.data.featurizers.atom import ZINC_ATOM_TYPES, OGBAtomFeaturizer, ZINCAtomFeaturizer, zinc_atom_type
from gea_graph.data.featurizers.base import ColumnFeaturizer, GraphFeaturizer, InvalidSmilesError, UnknownAtomTypeError
from gea_graph.data.featurizers.bond import ZINC_BOND_TYPES, OGBBondFeaturizer, ZINCBondFeaturizer
from gea_graph.data.featurizers.graphs import (
    featurize,
    featurize_chunk,
    invalid_smiles_error,
    molecule_columns,
    molecule_graphs,
    write_skipped,
)
from gea_graph.data.featurizers.molecule import (
    FEATURE_WIDTHS,
    FEATURES,
    MAX_EDGES,
    MAX_NODES,
    MolGraphFeaturizer,
    SizeBounds,
    check_features,
    mol_arrays,
    read_smiles,
)

__all__ = [
    "FEATURES",
    "FEATURE_WIDTHS",
    "MAX_EDGES",
    "MAX_NODES",
    "ZINC_ATOM_TYPES",
    "ZINC_BOND_TYPES",
    "ColumnFeaturizer",
    "GraphFeaturizer",
    "InvalidSmilesError",
    "MolGraphFeaturizer",
    "OGBAtomFeaturizer",
    "OGBBondFeaturizer",
    "SizeBounds",
    "UnknownAtomTypeError",
    "ZINCAtomFeaturizer",
    "ZINCBondFeaturizer",
    "check_features",
    "featurize",
    "featurize_chunk",
    "invalid_smiles_error",
    "mol_arrays",
    "molecule_columns",
    "molecule_graphs",
    "read_smiles",
    "write_skipped",
    "zinc_atom_type",
]
