r"""A PCQM4Mv2 replica in OGB's raw layout, for measuring dataset builds at the real scale, and OGB's own processing of
it (the reference of those measurements). Command line: ``scripts/make_pcqm4mv2_replica.py`` and
``scripts/ogb_pcqm4mv2_process.py``; used by the ``scale`` group of ``gea-graph perf``
(:mod:`gea_graph.bench.perf.scale`).

:func:`make_replica` writes, as OGB's ``pcqm4m-v2.zip`` unpacks::

    OUT_ROOT/pcqm4m-v2/raw/data.csv.gz   columns idx, smiles, homolumogap (gzip CSV, one row per molecule)
    OUT_ROOT/pcqm4m-v2/split_dict.pt     {"train", "valid", "test-dev", "test-challenge"} -> numpy int64 indices
    OUT_ROOT/pcqm4m-v2/RELEASE_v1.txt    without it OGB's loader asks on stdin whether to delete the folder

so that both ``gea_graph.data.PCQM4Mv2(root=OUT_ROOT)`` and OGB's own ``ogb.lsc.PygPCQM4Mv2Dataset(root=OUT_ROOT)``
read it unchanged (OGB 1.3.6 under torch >= 2.6 needs :func:`ogb_pcqm4mv2`; see there).

Rows: the molecules of the mirrored 2k sample (``$GEA_GRAPH_MIRROR/pcqm4mv2-sample/pcqm4mv2-2k.csv``, columns
``smiles,homo``: CXSMILES with explicit hydrogens and 3D coordinates, and the HOMO-LUMO gap in eV), each converted
once to a heavy-atom SMILES with RDKit (``MolToSmiles(RemoveHs(MolFromSmiles(s)))``), repeated cyclically: row ``i``
is sample molecule ``i mod 1999``. The gap is copied as its text in the sample.

Splits: OGB's sizes (train 3,378,606 / valid 73,545 / test-dev 147,037 / test-challenge 147,432 = 3,746,620); for
fewer rows they are scaled proportionally (largest remainder; every split has at least one row). The splits are
contiguous blocks of indices in that order (OGB's real splits are index arrays too; only their sizes matter here). As
in OGB's file, the ``homolumogap`` of the test-dev and test-challenge rows is empty (NaN); OGB's processing asserts
exactly that.

To measure OGB's processing on a fraction of the full size, make a smaller replica (e.g. 374,662 rows for 10%) and
scale its time and memory linearly (OGB keeps every graph of the dataset in one Python list).

The CSV is written in chunks of 100,000 rows, so memory stays bounded at any size. Every file is written to a
temporary name in its folder and then renamed with ``os.replace``, ``RELEASE_v1.txt`` last, so a killed run never
leaves a half-written file under its final name. A folder holding ``processed/`` caches is refused (they would not
match the new raw files).
"""


from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from gea_graph.data.config import mirror_root
from gea_graph.io import atomic_write

FULL_ROWS = 3_746_620
OGB_SPLIT_SIZES = {"train": 3_378_606, "valid": 73_545, "test-dev": 147_037, "test-challenge": 147_432}
LABELLED = ("train", "valid")  # test-dev and test-challenge have no public labels: NaN (an empty CSV field)
SAMPLE = Path("pcqm4mv2-sample") / "pcqm4mv2-2k.csv"
SAMPLE_MD5 = "e660adb8622090b486b30b9ea6e54f5a"
CHUNK_ROWS = 100_000
assert sum(OGB_SPLIT_SIZES.values()) == FULL_ROWS


def split_sizes(rows: int) -> dict[str, int]:
    """OGB's split sizes scaled to ``rows`` by the largest-remainder method (exact at :data:`FULL_ROWS`), with at
    least one row per split (taken from the largest split)."""
    if rows < len(OGB_SPLIT_SIZES):
        raise ValueError(f"rows must be at least {len(OGB_SPLIT_SIZES)} (one row per split), got {rows}")
    quotas = {name: rows * size / FULL_ROWS for name, size in OGB_SPLIT_SIZES.items()}
    sizes = {name: int(q) for name, q in quotas.items()}
    by_remainder = sorted(quotas, key=lambda name: quotas[name] - sizes[name], reverse=True)
    for name in by_remainder[:rows - sum(sizes.values())]:
        sizes[name] += 1
    for name in [name for name, size in sizes.items() if size == 0]:
        sizes[max(sizes, key=sizes.get)] -= 1
        sizes[name] = 1
    assert sum(sizes.values()) == rows
    return sizes


def default_sample() -> Path:
    """The mirrored sample: in ``$GEA_GRAPH_MIRROR``, else in ``../shared/data`` beside the checkout."""
    mirror = mirror_root() or Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return mirror / SAMPLE


def read_sample(path: Path, check_md5: bool) -> tuple[list[str], list[str]]:
    """Heavy-atom SMILES and gap texts of the sample CSV (columns ``smiles,homo``)."""
    import pandas as pd
    from rdkit import Chem, RDLogger

    if not path.is_file():
        raise FileNotFoundError(f"no PCQM4Mv2 sample at {path}: pass another sample (--sample PATH) or set "
                                f"GEA_GRAPH_MIRROR to the mirror folder holding {SAMPLE}")
    if check_md5:
        digest = hashlib.md5(path.read_bytes()).hexdigest()
        if digest != SAMPLE_MD5:
            raise ValueError(f"{path} has MD5 {digest}, expected the mirrored sample's {SAMPLE_MD5}")
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = {"smiles", "homo"} - set(table.columns)
    if missing:
        raise ValueError(f"{path} lacks the column(s) {sorted(missing)} (has {list(table.columns)}); "
                         "expected the mirrored sample's columns smiles,homo")
    RDLogger.DisableLog("rdApp.*")
    smiles = []
    for i, text in enumerate(table["smiles"]):
        mol = Chem.MolFromSmiles(text)
        if mol is None:
            raise ValueError(f"{path} row {i}: RDKit cannot parse the SMILES {text[:80]!r}")
        heavy = Chem.MolToSmiles(Chem.RemoveHs(mol))
        if "," in heavy or '"' in heavy:  # never for a plain SMILES; the CSV is written without quoting
            raise ValueError(f"{path} row {i}: SMILES {heavy!r} would need CSV quoting")
        smiles.append(heavy)
    gaps = table["homo"].tolist()
    for i, gap in enumerate(gaps):
        try:
            float(gap)
        except ValueError:
            raise ValueError(f"{path} row {i}: the gap {gap!r} is not a number") from None
    return smiles, gaps


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> int:
    """``write(file)`` into a temporary file beside ``path`` (:func:`gea_graph.io.atomic_write`), fsync, then
    rename it to ``path``; returns its bytes."""
    with atomic_write(path, "wb", fsync=True) as f:
        write(f)
    return path.stat().st_size


def write_csv(f: BinaryIO, smiles: list[str], gaps: list[str], labelled_rows: int, rows: int) -> None:
    """The gzip CSV ``idx,smiles,homolumogap``: rows ``< labelled_rows`` carry the gap, the others an empty field."""
    labelled = [f",{s},{g}\n" for s, g in zip(smiles, gaps)]
    unlabelled = [f",{s},\n" for s in smiles]
    n = len(smiles)
    # mtime=0: the same arguments give the same bytes; level 6: zlib's default trade of speed for size.
    with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=f, mtime=0) as gz:
        gz.write(b"idx,smiles,homolumogap\n")
        for start in range(0, rows, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, rows)
            gz.write("".join(f"{i}{labelled[i % n] if i < labelled_rows else unlabelled[i % n]}"
                             for i in range(start, stop)).encode())


def make_replica(out_root: str | os.PathLike, rows: int = FULL_ROWS, sample: Path | None = None) -> dict:
    """Write the replica under ``out_root/pcqm4m-v2``; returns a summary (rows, split sizes, bytes per file)."""
    import torch

    sizes = split_sizes(rows)
    folder = Path(out_root) / "pcqm4m-v2"
    if (folder / "processed").exists():
        raise FileExistsError(f"{folder / 'processed'} exists: its caches would not match a new replica; "
                              "remove it (or pick another OUT_ROOT) first")
    smiles, gaps = read_sample(sample or default_sample(), check_md5=sample is None)
    (folder / "raw").mkdir(parents=True, exist_ok=True)
    labelled_rows = sum(sizes[name] for name in LABELLED)
    assert list(OGB_SPLIT_SIZES)[:len(LABELLED)] == list(LABELLED)  # labelled blocks first
    bounds = np.cumsum([0, *sizes.values()])
    split = {name: np.arange(bounds[k], bounds[k + 1], dtype=np.int64) for k, name in enumerate(sizes)}

    written = {}
    csv_path = folder / "raw" / "data.csv.gz"
    written[csv_path] = write_atomic(csv_path, lambda f: write_csv(f, smiles, gaps, labelled_rows, rows))
    split_path = folder / "split_dict.pt"
    written[split_path] = write_atomic(split_path, lambda f: torch.save(split, f))
    release = folder / "RELEASE_v1.txt"
    written[release] = write_atomic(release, lambda f: f.write(
        f"PCQM4Mv2 replica: {rows} rows, the {len(smiles)}-molecule sample repeated; not OGB's data\n".encode()))
    return {"rows": rows, "splits": sizes, "files": {str(p): b for p, b in written.items()}}


def ogb_safe_globals() -> list[Any]:
    r"""What :func:`ogb_pcqm4mv2` admits to ``torch.load``: numpy's array reconstruction (as
    :mod:`gea_graph.data.molecules` admits it, for ``split_dict.pt``) and the three PyG classes that a pickled ``Data``
    holds and PyG does not register itself (for OGB's processed file)."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    from gea_graph.data.molecules import _NUMPY_SAFE_GLOBALS

    return [*_NUMPY_SAFE_GLOBALS, DataEdgeAttr, DataTensorAttr, GlobalStorage]


def ogb_pcqm4mv2(root: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    r"""OGB's own, unmodified PCQM4Mv2 processing: ``ogb.lsc.PygPCQM4Mv2Dataset(root)`` (which processes
    ``root/pcqm4m-v2/raw`` when its cache ``root/pcqm4m-v2/processed/geometric_data_processed.pt`` is missing), with
    :func:`ogb_safe_globals` admitted to ``torch.load``; returns the dataset and its split dict (index tensors).

    Why the safe globals: OGB 1.3.6 calls ``torch.load`` without ``weights_only``, and torch >= 2.6 defaults it to
    ``True``, which refuses both what ``split_dict.pt`` holds (numpy index arrays, read by ``get_idx_split`` inside
    ``process``) and OGB's processed file (a pickled ``(Data, slices)`` pair, read at the end of ``__init__``): the
    plain call raises ``UnpicklingError``. Admitting exactly those classes keeps loading free of arbitrary code, and
    the processing is OGB's own code."""
    import torch
    from ogb.lsc import PygPCQM4Mv2Dataset

    with torch.serialization.safe_globals(ogb_safe_globals()):
        dataset = PygPCQM4Mv2Dataset(root=str(root))
        return dataset, dataset.get_idx_split()
