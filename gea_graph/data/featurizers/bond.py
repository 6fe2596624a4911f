r"""Bond featurisers: OGB's three bond features and the Benchmarking-GNNs ZINC bond types."""

from __future__ import annotations

from typing import Any

from rdkit import Chem

from gea_graph.data.featurizers.atom import ogb_lookup, ogb_vocabulary
from gea_graph.data.featurizers.base import UnknownAtomTypeError


class OGBBondFeaturizer:
    r"""OGB's bond features (``ogb.utils.features.bond_to_feature_vector``), for OGB's ``BondEncoder``:

    +--------+------------------------------------------+-------------------------------------+
    | column | feature                                  | unlisted value                      |
    +========+==========================================+=====================================+
    | 0      | bond type (single, double, triple, arom.)| ``misc`` (the last index)           |
    | 1      | stereo (none, Z, E, cis, trans, any)     | an error (OGB's list has no misc)   |
    | 2      | conjugated? (0/1)                        | --                                  |
    +--------+------------------------------------------+-------------------------------------+
    """

    names = ("possible_bond_type_list", "possible_bond_stereo_list", "possible_is_conjugated_list")

    def __init__(self) -> None:
        self._type = ogb_lookup("possible_bond_type_list", Chem.rdchem.BondType)
        self._stereo = ogb_lookup("possible_bond_stereo_list", Chem.rdchem.BondStereo)[0]

    def __len__(self) -> int:
        return 3

    def __call__(self, bond: Chem.Bond) -> tuple[int, ...]:
        stereo = self._stereo.get(bond.GetStereo())
        if stereo is None:  # OGB's own look-up fails here too
            raise UnknownAtomTypeError(f"bond {bond.GetIdx()} (atoms {bond.GetBeginAtomIdx()}-"
                                       f"{bond.GetEndAtomIdx()}) has stereo {bond.GetStereo()}, which OGB's features "
                                       f"do not list")
        return self._type[0].get(bond.GetBondType(), self._type[1]), stereo, int(bond.GetIsConjugated())

    def vocabulary(self) -> dict[str, list[Any]]:
        return ogb_vocabulary(self.names)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"


#: The Benchmarking-GNNs ZINC bond types: ids of the kekulised molecule's bonds (``NONE`` = 0 is never stored: only
#: bonds are edges).
ZINC_BOND_TYPES: tuple[str, ...] = ("NONE", "SINGLE", "DOUBLE", "TRIPLE")


class ZINCBondFeaturizer:
    r"""The bond type of a kekulised molecule's bond, for ``nn.Embedding(4, d)``:

    +--------+----------------------------------------------------+----------------+
    | column | feature                                            | unlisted value |
    +========+====================================================+================+
    | 0      | 1 single, 2 double, 3 triple (:data:`ZINC_BOND_TYPES`) | an error   |
    +--------+----------------------------------------------------+----------------+
    """

    def __init__(self) -> None:
        self._index = {getattr(Chem.rdchem.BondType, name): i for i, name in enumerate(ZINC_BOND_TYPES) if i > 0}

    def __len__(self) -> int:
        return 1

    def __call__(self, bond: Chem.Bond) -> tuple[int, ...]:
        index = self._index.get(bond.GetBondType())
        if index is None:
            raise UnknownAtomTypeError(f"bond {bond.GetIdx()} (atoms {bond.GetBeginAtomIdx()}-"
                                       f"{bond.GetEndAtomIdx()}) of the kekulised molecule is {bond.GetBondType()}, "
                                       f"not one of SINGLE, DOUBLE, TRIPLE")
        return (index,)

    def vocabulary(self) -> dict[str, list[Any]]:
        return {"bond_types": list(ZINC_BOND_TYPES)}

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"
