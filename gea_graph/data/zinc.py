r"""ZINC (the Benchmarking-GNNs subset), built from its SMILES."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from gea_graph.data.config import PathLike
from gea_graph.data.download import RawFile
from gea_graph.data.featurizers import check_features
from gea_graph.data.molecules import MoleculeSource, _MoleculeDataset

GRAPHIUM = "https://raw.githubusercontent.com/datamol-io/graphium/2573628b14751178679cd4606a1523486585d873"


class ZINC(_MoleculeDataset):
    r"""The ZINC 12k subset of the `"Benchmarking Graph Neural Networks" <https://arxiv.org/abs/2003.00982>`_
    suite (the graphs of PyG's ``ZINC(subset=True)``), built from its SMILES with RDKit.

    Features (:obj:`features`):

    - ``"bench"`` (default): the Benchmarking-GNNs encoding that every published ZINC number uses (GEAET, GFSA,
      GraphGPS, GRIT): ``x`` :math:`(N, 1)` long, the atom type in
      :data:`~gea_graph.data.featurizers.ZINC_ATOM_TYPES` (28 types: element, explicit hydrogens, charge; see
      :func:`~gea_graph.data.featurizers.zinc_atom_type`), and ``edge_attr`` :math:`(E, 1)` long, the bond type
      of the kekulised molecule (1 single, 2 double, 3 triple; 4 types with the unused 0). Embed them with
      ``node_encoder: embedding`` (``node_in: 1``, ``node_vocab: 28``) and ``edge_encoder: embedding``
      (``edge_in: 1``, ``edge_vocab: 4``). An atom outside the vocabulary raises :class:`UnknownAtomTypeError`.
    - ``"ogb"``: OGB's ``smiles2graph`` features (``x`` :math:`(N, 9)`, ``edge_attr`` :math:`(E, 3)` long) for
      ``AtomEncoder`` / ``BondEncoder``; richer than the papers' input, so not comparable with published MAEs.

    Target ``y`` :math:`(1)` float: ``score`` (constrained solubility, logP - SA). Splits from the official index
    file: 10,000 / 1,000 / 1,000, in that file's order. Each featurisation has its own processed cache.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid, max_nodes, max_edges:
            see :class:`~gea_graph.data.base.CachedDataset` and :class:`~gea_graph.data.molecules._MoleculeDataset`.
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
                 features: str = "bench", max_nodes: int | None = None, max_edges: int | None = None) -> None:
        check_features(features)
        self.features = features
        super().__init__(root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid,
                         max_nodes, max_edges)

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

