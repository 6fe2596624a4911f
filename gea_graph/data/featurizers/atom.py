r"""Atom featurisers: OGB's nine atom features and the 28 Benchmarking-GNNs ZINC atom types."""

from __future__ import annotations

import re
from typing import Any

from ogb.utils.features import allowable_features
from rdkit import Chem

from gea_graph.data.featurizers.base import UnknownAtomTypeError


def ogb_lookup(name: str, enum: type | None = None) -> tuple[dict, int]:
    r"""OGB's list ``allowable_features[name]`` as a dict value -> index (enum members where the list holds their
    names), and the index OGB's ``safe_index`` gives unlisted values (the last one)."""
    values = allowable_features[name]
    table = {}
    for i, value in enumerate(values):
        if value != "misc":
            table[getattr(enum, value) if enum is not None else value] = i
    return table, len(values) - 1


def ogb_vocabulary(names: tuple[str, ...]) -> dict[str, list[Any]]:
    r"""OGB's ``allowable_features`` lists :obj:`names`, as JSON types."""
    return {name: [v if isinstance(v, (int, str)) else str(v) for v in allowable_features[name]] for name in names}


class OGBAtomFeaturizer:
    r"""OGB's atom features (``ogb.utils.features.atom_to_feature_vector``), one vocabulary index per column, for
    OGB's ``AtomEncoder``:

    +--------+-------------------------------------+-----------------------------------+
    | column | feature                             | unlisted value                    |
    +========+=====================================+===================================+
    | 0      | atomic number (1..118)              | ``misc`` (the last index)         |
    | 1      | chirality tag                       | ``misc``                          |
    | 2      | total degree (0..10)                | ``misc``                          |
    | 3      | formal charge (-5..5)               | ``misc``                          |
    | 4      | total hydrogens (0..8)              | ``misc``                          |
    | 5      | radical electrons (0..4)            | ``misc``                          |
    | 6      | hybridisation                       | ``misc``                          |
    | 7      | aromatic? (0/1)                     | --                                |
    | 8      | in a ring? (0/1)                    | --                                |
    +--------+-------------------------------------+-----------------------------------+

    The same values as OGB's function (tested), from dict look-ups instead of its ``list.index`` calls.
    """

    names = ("possible_atomic_num_list", "possible_chirality_list", "possible_degree_list",
             "possible_formal_charge_list", "possible_numH_list", "possible_number_radical_e_list",
             "possible_hybridization_list", "possible_is_aromatic_list", "possible_is_in_ring_list")

    def __init__(self) -> None:
        # (dict.get, the index of unlisted values) per column: bound once, called per atom
        self._lookups = tuple((table.get, misc) for table, misc in (
            ogb_lookup("possible_atomic_num_list"), ogb_lookup("possible_chirality_list", Chem.rdchem.ChiralType),
            ogb_lookup("possible_degree_list"), ogb_lookup("possible_formal_charge_list"),
            ogb_lookup("possible_numH_list"), ogb_lookup("possible_number_radical_e_list"),
            ogb_lookup("possible_hybridization_list", Chem.rdchem.HybridizationType)))

    def __len__(self) -> int:
        return 9

    def __call__(self, atom: Chem.Atom) -> tuple[int, ...]:
        (num, num_x), (chiral, chiral_x), (deg, deg_x), (charge, charge_x), (hs, hs_x), (rad, rad_x), \
            (hyb, hyb_x) = self._lookups
        return (num(atom.GetAtomicNum(), num_x), chiral(atom.GetChiralTag(), chiral_x),
                deg(atom.GetTotalDegree(), deg_x), charge(atom.GetFormalCharge(), charge_x),
                hs(atom.GetTotalNumHs(), hs_x), rad(atom.GetNumRadicalElectrons(), rad_x),
                hyb(atom.GetHybridization(), hyb_x), int(atom.GetIsAromatic()), int(atom.IsInRing()))

    def vocabulary(self) -> dict[str, list[Any]]:
        return ogb_vocabulary(self.names)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"


#: The 28 atom types of the Benchmarking-GNNs ZINC, in their index order (benchmarking-gnns issue #42, the TU Dortmund
#: ZINC README): element, then ``H<n>`` for an explicit hydrogen count, then the sign of a formal charge.
ZINC_ATOM_TYPES: tuple[str, ...] = (
    "C", "O", "N", "F", "C H1", "S", "Cl", "O -", "N H1 +", "Br", "N H3 +", "N H2 +", "N +", "N -", "S -", "I", "P",
    "O H1 +", "N H1 -", "O +", "S +", "P H1", "P H2", "C H2 -", "P +", "S H1 +", "C H1 -", "P H1 +")

# The hydrogen count inside an atom's SMILES bracket: "[C@@H]" -> "", "[NH3+]" -> "3"; no match: no H written.
_BRACKET_H = re.compile(r"^\[\d*[A-Z][a-z]?(?:@@|@(?:TH|AL|SP|TB|OH)?\d*)?H(\d*)")


def zinc_atom_type(atom: Chem.Atom) -> str:
    r"""The Benchmarking-GNNs ZINC type of an atom of a **kekulised** molecule: its element, then ``H<n>`` where
    :math:`n > 0` hydrogens are written in the atom's bracket when RDKit writes the kekulised molecule as SMILES, then
    ``+`` / ``-`` for a positive / negative formal charge (e.g. ``"C H1"`` for ``[C@H]``, ``"N H1 +"`` for ``[NH+]``
    and aromatic ``[nH+]``, plain ``"N"`` for aromatic ``[nH]``, which the kekulé SMILES writes ``N``). The name may
    lie outside :data:`ZINC_ATOM_TYPES`; :class:`ZINCAtomFeaturizer` checks."""
    match = _BRACKET_H.match(atom.GetSmarts())  # GetSmarts of a parsed (non-query) atom: its SMILES token
    hydrogens = 0 if match is None else int(match.group(1) or 1)
    charge = atom.GetFormalCharge()
    return (atom.GetSymbol() + (f" H{hydrogens}" if hydrogens else "")
            + (" +" if charge > 0 else " -" if charge < 0 else ""))


class ZINCAtomFeaturizer:
    r"""The Benchmarking-GNNs ZINC atom type of an atom of a kekulised molecule, for ``nn.Embedding(28, d)``:

    +--------+---------------------------------------------------------------+----------------+
    | column | feature                                                       | unlisted value |
    +========+===============================================================+================+
    | 0      | index of :func:`zinc_atom_type` in :data:`ZINC_ATOM_TYPES`    | an error       |
    +--------+---------------------------------------------------------------+----------------+

    There is no unknown bucket: an atom of another type raises :class:`UnknownAtomTypeError`.
    """

    def __init__(self) -> None:
        self._index = {name: i for i, name in enumerate(ZINC_ATOM_TYPES)}

    def __len__(self) -> int:
        return 1

    def __call__(self, atom: Chem.Atom) -> tuple[int, ...]:
        name = zinc_atom_type(atom)
        if name not in self._index:
            raise UnknownAtomTypeError(f"atom {atom.GetIdx()} ({atom.GetSmarts()} in the kekulé SMILES) has type "
                                       f"{name!r}, which is not one of the 28 ZINC atom types")
        return (self._index[name],)

    def vocabulary(self) -> dict[str, list[Any]]:
        return {"atom_types": list(ZINC_ATOM_TYPES)}

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"
