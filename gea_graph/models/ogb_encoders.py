r"""OGB's atom and bond encoders (nine and three tables over ``smiles2graph``'s columns), computed by
:func:`~gea_graph.models.embeddings.summed_embeddings`; imported only by a model that reads OGB features, since
importing OGB's encoders imports scikit-learn."""
from __future__ import annotations

from ogb.graphproppred.mol_encoder import AtomEncoder, BondEncoder
from torch import Tensor

from gea_graph.models.embeddings import summed_embeddings


class AtomFeatureEncoder(AtomEncoder):
    r"""OGB's :class:`~ogb.graphproppred.mol_encoder.AtomEncoder` (a subclass: the same nine tables, initialisation
    and state-dict keys), computed by :func:`summed_embeddings`: ``x [N, 9] -> [N, C]``."""

    def forward(self, x: Tensor) -> Tensor:
        return summed_embeddings(x, [table.weight for table in self.atom_embedding_list])


class BondFeatureEncoder(BondEncoder):
    r"""OGB's :class:`~ogb.graphproppred.mol_encoder.BondEncoder` (a subclass: the same three tables, initialisation
    and state-dict keys), computed by :func:`summed_embeddings`: ``[E, 3] -> [E, C]``."""

    def forward(self, edge_attr: Tensor) -> Tensor:
        return summed_embeddings(edge_attr, [table.weight for table in self.bond_embedding_list])
