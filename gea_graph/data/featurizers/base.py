r"""What a featuriser is: a callable from an RDKit object to integer columns, and the errors of featurisation.

Featurisers follow two small protocols, as Chemprop's (``chemprop/featurizers/base.py``):

- :class:`ColumnFeaturizer`: an atom or a bond -> one row of integer columns (``len()`` of them), each column an
  index into a vocabulary, ready for an embedding (OGB's ``AtomEncoder`` / ``BondEncoder``, ``nn.Embedding``);
- :class:`GraphFeaturizer`: a molecule -> ``(x [N, A], edge_index [2, E], edge_attr [E, B])`` int64 arrays, with
  ``shape == (A, B)``.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import numpy as np
from rdkit import Chem

S_contra = TypeVar("S_contra", contravariant=True)

#: ``(x [N, A], edge_index [2, E], edge_attr [E, B])``, all int64.
MolArrays = tuple[np.ndarray, np.ndarray, np.ndarray]


class ColumnFeaturizer(Protocol[S_contra]):
    r"""Maps an atom or a bond to ``len(self)`` integer columns; :meth:`vocabulary` names each column's values."""

    def __len__(self) -> int: ...

    def __call__(self, item: S_contra) -> tuple[int, ...]: ...

    def vocabulary(self) -> dict[str, list[Any]]: ...


class GraphFeaturizer(Protocol):
    r"""Maps a molecule (and its SMILES, named in errors) to :data:`MolArrays` of widths :attr:`shape`."""

    @property
    def shape(self) -> tuple[int, int]: ...

    def __call__(self, mol: Chem.Mol, smiles: str = "") -> MolArrays: ...


class InvalidSmilesError(ValueError):
    r"""RDKit cannot parse a SMILES of a dataset."""


class UnknownAtomTypeError(ValueError):
    r"""An atom (or bond) of a molecule is outside the featurisation's vocabulary (the Benchmarking-GNNs ZINC types,
    or a bond stereo OGB does not list). :attr:`reason` says what, in a few words (the message also names the
    molecule and the vocabulary)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message
