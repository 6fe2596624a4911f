r"""Molecule featurisers (an atom and a bond featuriser over an RDKit molecule), the feature modes by name, and the
size bounds every input meets before RDKit or a positional encoding sees it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from rdkit import Chem, RDLogger

from gea_graph.data.featurizers.atom import OGBAtomFeaturizer, ZINCAtomFeaturizer
from gea_graph.data.featurizers.base import ColumnFeaturizer, MolArrays, UnknownAtomTypeError
from gea_graph.data.featurizers.bond import OGBBondFeaturizer, ZINCBondFeaturizer
from gea_graph.transforms import MAX_DENSE_NODES

#: Default largest graph, in nodes (atoms) and directed edges (two per bond). The largest graphs of the supported
#: datasets (their cards in ``datasets/``) are Peptides' 444 atoms / 928 directed edges and the superpixel graphs' at
#: most 500 nodes (mean 2,700 directed edges); 1,000 nodes is about twice that, and 20 edges per node leaves room
#: for dense superpixel graphs (molecules have about 2).
MAX_NODES = 1_000
MAX_EDGES = 20_000
#: Characters a SMILES may have per allowed node (Peptides' longest SMILES, 1,043 characters, has 3.2 per atom).
CHARS_PER_NODE = 10
_WHITESPACE = re.compile(r"\s")


@dataclass(frozen=True)
class SizeBounds:
    r"""The largest input graph accepted: :attr:`max_nodes` nodes (atoms) and :attr:`max_edges` directed edges
    (two per bond), and, for SMILES, :attr:`max_chars` characters (:data:`CHARS_PER_NODE` per node), checked before
    RDKit reads the text. Beyond them an input is refused with its reason, so no featurisation or positional
    encoding ever works on a larger graph (LapPE's and RWPE's dense :math:`N \times N` matrices are at most
    ``max_nodes`` squared; ``max_nodes`` is at most :data:`~gea_graph.transforms.MAX_DENSE_NODES`). Set by the
    dataset options / recipe keys ``data.options.max_nodes`` / ``max_edges`` and ``gea-graph predict --max-nodes`` /
    ``--max-edges``."""

    max_nodes: int = MAX_NODES
    max_edges: int = MAX_EDGES

    def __post_init__(self) -> None:
        for name, most in (("max_nodes", MAX_DENSE_NODES), ("max_edges", None)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive whole number, got {value!r}")
            if most is not None and value > most:
                raise ValueError(f"{name} must be at most {most:,} (positional encodings and attention build dense "
                                 f"N x N matrices), got {value:,}")

    @property
    def max_chars(self) -> int:
        return CHARS_PER_NODE * self.max_nodes

    @property
    def is_default(self) -> bool:
        return self == SizeBounds()

    def graph_reason(self, num_nodes: int, num_edges: int) -> str | None:
        r"""Why a graph of this size is refused, or :obj:`None`."""
        if num_nodes > self.max_nodes:
            return f"{num_nodes:,} atoms/nodes, more than the bound of {self.max_nodes:,} (max_nodes)"
        if num_edges > self.max_edges:
            return f"{num_edges:,} directed edges, more than the bound of {self.max_edges:,} (max_edges)"
        return None

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(max_nodes={self.max_nodes}, max_edges={self.max_edges})"


def read_smiles(text: object, bounds: SizeBounds) -> tuple[Chem.Mol | None, str, str | None]:
    r"""``(molecule, SMILES, None)`` for a SMILES RDKit parses within :obj:`bounds`, else ``(None, SMILES, reason)``.

    Leading and trailing whitespace is stripped; whitespace inside is refused (RDKit would read what follows it as
    the molecule's name and silently drop it). A text longer than ``bounds.max_chars`` never reaches RDKit.
    """
    if not isinstance(text, str) or not text.strip():
        return None, text if isinstance(text, str) else "", "no SMILES (an empty cell)"
    smiles = text.strip()
    if len(smiles) > bounds.max_chars:
        return None, smiles, (f"the SMILES has {len(smiles):,} characters, more than the {bounds.max_chars:,} "
                              f"allowed ({CHARS_PER_NODE} per atom of the bound max_nodes={bounds.max_nodes:,})")
    space = _WHITESPACE.search(smiles)
    if space is not None:
        inner = space.start()
        return None, smiles, (f"whitespace ({smiles[inner]!r}) inside the SMILES at character {inner}: RDKit would "
                              f"read only {smiles[:inner][:40]!r} and take the rest as a name")
    RDLogger.DisableLog("rdApp.*")  # the reason says more, once
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return None, smiles, "RDKit cannot parse this SMILES"
    reason = bounds.graph_reason(mol.GetNumAtoms(), 2 * mol.GetNumBonds())
    return (None, smiles, reason) if reason else (mol, smiles, None)


class MolGraphFeaturizer:
    r"""A molecule as ``(x [N, len(atom)], edge_index [2, 2B], edge_attr [2B, len(bond)])`` int64 arrays: row ``i`` of
    ``x`` is :obj:`atom_featurizer` of atom ``i``, and each bond gives two directed edges (``i -> j`` then
    ``j -> i``, in bond order) with :obj:`bond_featurizer` of the bond. With :obj:`kekulize`, the molecule is kekulised
    (in place, aromatic flags cleared) first.

    Raises :class:`UnknownAtomTypeError` naming the SMILES, the atom or bond and the vocabulary when a featuriser has
    no value for it.
    """

    def __init__(self, atom_featurizer: ColumnFeaturizer, bond_featurizer: ColumnFeaturizer, kekulize: bool = False,
                 advice: str = "") -> None:
        self.atom_featurizer = atom_featurizer
        self.bond_featurizer = bond_featurizer
        self.kekulize = kekulize
        self.advice = advice

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.atom_featurizer), len(self.bond_featurizer)

    def vocabulary(self) -> dict[str, list[Any]]:
        r"""Every column's values, atoms' and bonds' (what a checkpoint records), in name order."""
        return dict(sorted({**self.atom_featurizer.vocabulary(), **self.bond_featurizer.vocabulary()}.items()))

    def __call__(self, mol: Chem.Mol, smiles: str = "") -> MolArrays:
        try:
            return self._arrays(mol)
        except UnknownAtomTypeError as err:
            raise UnknownAtomTypeError(f"{smiles!r}: {err.reason}{self.advice}", err.reason) from None

    def _arrays(self, mol: Chem.Mol) -> MolArrays:
        if self.kekulize:
            Chem.Kekulize(mol, clearAromaticFlags=True)
        atom_at, featurize_atom = mol.GetAtomWithIdx, self.atom_featurizer.__call__  # indexed access: faster
        atoms = [featurize_atom(atom_at(a)) for a in range(mol.GetNumAtoms())]
        bond_at, featurize_bond = mol.GetBondWithIdx, self.bond_featurizer.__call__
        edges, feats = [], []
        for b in range(mol.GetNumBonds()):
            bond = bond_at(b)
            i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
            feat = featurize_bond(bond)
            edges += [(i, j), (j, i)]
            feats += [feat, feat]
        width_x, width_e = self.shape
        x = np.array(atoms, dtype=np.int64).reshape(-1, width_x)
        edge_index = np.ascontiguousarray(np.array(edges, dtype=np.int64).reshape(-1, 2).T)
        return x, edge_index, np.array(feats, dtype=np.int64).reshape(-1, width_e)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.atom_featurizer!r}, {self.bond_featurizer!r}, "
                f"kekulize={self.kekulize})")


#: The feature modes by name (the ``features`` option of the molecular datasets): ``"ogb"``, OGB's ``smiles2graph``
#: features (``AtomEncoder`` / ``BondEncoder`` apply); ``"bench"``, the Benchmarking-GNNs ZINC encoding (28 atom
#: types, kekulé bond types 1..3; ``nn.Embedding``).
FEATURES: dict[str, MolGraphFeaturizer] = {
    "ogb": MolGraphFeaturizer(OGBAtomFeaturizer(), OGBBondFeaturizer(),
                              advice=" (OGB's bond stereo list: STEREONONE, STEREOZ, STEREOE, STEREOCIS, STEREOTRANS, "
                                     "STEREOANY)"),
    "bench": MolGraphFeaturizer(ZINCAtomFeaturizer(), ZINCBondFeaturizer(), kekulize=True,
                                advice=" of the Benchmarking-GNNs ZINC vocabulary; use features='ogb' for molecules "
                                       "outside ZINC's vocabulary"),
}
#: What each feature mode's vocabulary is, in words for a user (its name, e.g. "bench", is internal).
VOCABULARY_NAMES: dict[str, str] = {
    "ogb": "OGB's atom and bond features",
    "bench": "ZINC's 28 atom and 4 bond types, encoded as in Benchmarking-GNNs",
}
#: Columns of ``x`` and ``edge_attr`` of each feature mode.
FEATURE_WIDTHS: dict[str, tuple[int, int]] = {name: f.shape for name, f in FEATURES.items()}


def check_features(features: str) -> None:
    r"""Raises :class:`ValueError` unless :obj:`features` names a feature mode of :data:`FEATURES`."""
    if features not in FEATURES:
        raise ValueError(f"features must be one of {', '.join(map(repr, FEATURES))}, got {features!r}")


def mol_arrays(mol: Chem.Mol) -> MolArrays:
    r"""OGB's featurisation of a molecule: the same arrays as ``ogb.utils.smiles2graph`` (checked in the tests)."""
    return FEATURES["ogb"](mol)
