"""Run OGB's own, unmodified PCQM4Mv2 processing (``ogb.lsc.PygPCQM4Mv2Dataset(root)``) on a folder in OGB's raw
layout, e.g. a replica from ``scripts/make_pcqm4mv2_replica.py``:

    python scripts/ogb_pcqm4mv2_process.py ROOT

Why a wrapper: OGB 1.3.6 calls ``torch.load`` without ``weights_only``, and torch >= 2.6 defaults it to ``True``,
which refuses both what ``split_dict.pt`` holds (numpy index arrays, read by ``get_idx_split`` inside ``process``)
and OGB's processed file (a pickled ``(Data, slices)`` pair, read at the end of ``__init__``): the plain call raises
``UnpicklingError``. This wrapper runs the call inside ``torch.serialization.safe_globals`` admitting exactly those
classes (numpy's array reconstruction, as :mod:`gea_graph.data.molecules` admits it, and the three PyG classes a
pickled ``Data`` holds that PyG does not register itself), so loading still runs no arbitrary code and OGB's
processing is OGB's own code. Its processed cache is ``ROOT/pcqm4m-v2/processed/geometric_data_processed.pt``;
delete it to process again.

Measure it with ``scripts/measure_build.py``, e.g.::

    python scripts/measure_build.py --label ogb --disk ROOT/pcqm4m-v2/processed/geometric_data_processed.pt \\
        --json build.jsonl -- python scripts/ogb_pcqm4mv2_process.py ROOT
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage

from gea_graph.data.molecules import _NUMPY_SAFE_GLOBALS

OGB_SAFE_GLOBALS = [*_NUMPY_SAFE_GLOBALS, DataEdgeAttr, DataTensorAttr, GlobalStorage]


def ogb_pcqm4mv2(root: str | Path):
    """``ogb.lsc.PygPCQM4Mv2Dataset(root)`` (processing ``root/pcqm4m-v2/raw`` when its cache is missing), with
    :data:`OGB_SAFE_GLOBALS` admitted to ``torch.load``; returns the dataset and its split dict (index tensors)."""
    from ogb.lsc import PygPCQM4Mv2Dataset

    with torch.serialization.safe_globals(OGB_SAFE_GLOBALS):
        dataset = PygPCQM4Mv2Dataset(root=str(root))
        return dataset, dataset.get_idx_split()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, metavar="ROOT", help="folder holding pcqm4m-v2/ in OGB's raw layout")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    dataset, split = ogb_pcqm4mv2(args.root)
    sizes = ", ".join(f"{name} {len(index):,}" for name, index in split.items())
    print(f"OGB PygPCQM4Mv2Dataset: {len(dataset):,} graphs ({sizes}) in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
