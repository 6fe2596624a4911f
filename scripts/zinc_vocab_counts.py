"""Counts of every Benchmarking-GNNs atom type and bond type over all 12,000 ZINC molecules (train + val + test), as
the markdown tables of datasets/zinc.md, from ZINC(features="bench") built in a fresh temporary data root.

    python scripts/zinc_vocab_counts.py

Raw files come from $GEA_GRAPH_MIRROR (../shared/data beside the checkout when unset and present) or the web.
tests/data/test_zinc_bench.py checks that the card's tables equal these counts.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def main() -> None:
    mirror = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not os.environ.get("GEA_GRAPH_MIRROR") and mirror.is_dir():
        os.environ["GEA_GRAPH_MIRROR"] = str(mirror)

    import torch

    from gea_graph.data import ZINC
    from gea_graph.data.molecules import ZINC_ATOM_TYPES, ZINC_BOND_TYPES

    atoms = torch.zeros(len(ZINC_ATOM_TYPES), dtype=torch.long)
    bonds = torch.zeros(len(ZINC_BOND_TYPES), dtype=torch.long)
    graphs = 0
    with tempfile.TemporaryDirectory() as root:
        for split in ("train", "val", "test"):
            ds = ZINC(root, split, features="bench")
            atoms += torch.bincount(ds._data.x[:, 0], minlength=len(ZINC_ATOM_TYPES))
            bonds += torch.bincount(ds._data.edge_attr[:, 0], minlength=len(ZINC_BOND_TYPES))
            graphs += len(ds)
    print(f"{graphs} molecules, {int(atoms.sum())} atoms, {int(bonds.sum()) // 2} bonds "
          f"({int(bonds.sum())} directed edges): mean {atoms.sum() / graphs:.2f} nodes and "
          f"{bonds.sum() / graphs:.2f} directed edges per graph\n")
    print("| id | atom type | atoms |\n|---|---|---|")
    for i, name in enumerate(ZINC_ATOM_TYPES):
        print(f"| {i} | `{name}` | {int(atoms[i]):,} |")
    print("\n| id | bond type | bonds |\n|---|---|---|")
    for i, name in enumerate(ZINC_BOND_TYPES):
        print(f"| {i} | `{name}` | {int(bonds[i]) // 2:,} |")


if __name__ == "__main__":
    main()
