r"""Inputs of the performance suite: real mini-batches of ZINC (128 graphs) and Peptides-func
(64 graphs), and their float features for the layer rows.

* **ZINC** is built once per process, from the raw (mirrored) files into a fresh temporary data root
  with the PEs of the suite (``lap:8,rw:20``) through the registry
  (:func:`gea_graph.data.get_dataset`). That build *is* the dataset-build row (timed there); every
  other ZINC row (layers, training) reuses it, so a suite run featurises ZINC exactly once.
* **Peptides-func** comes from the registry when its cache already exists in the data root;
  otherwise only the sampled molecules of its training split are featurised from the raw file, with
  the project's own featuriser (:func:`gea_graph.data.molecules.featurize`) — the same graphs, at a
  fraction of the cost of processing all 15,535 peptides.

When a dataset cannot be had at all (no mirror, offline), the suite falls back to random
molecule-like graphs with the dataset's size distribution, and every row built on them says so.
"""
from __future__ import annotations

import resource
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch import Tensor
from torch_geometric.data import Batch, Data, InMemoryDataset
from torch_geometric.utils import to_undirected

#: Graphs per mini-batch, per dataset, as the performance issue fixes them.
BATCH_GRAPHS: dict[str, int] = {"ZINC": 128, "Peptides-func": 64}

#: Positional encodings of the suite's ZINC build (the dataset-build row's LapPE-8 + RWPE-20).
ZINC_PE = "lap:8,rw:20"

#: Node-count distribution of the random fallback: (mean, std, min, max) of the real datasets.
_SIZE_DIST: dict[str, tuple[float, float, int, int]] = {
    "ZINC": (23.2, 4.5, 9, 37),
    "Peptides-func": (150.9, 60.0, 8, 444),
}


@dataclass
class ZincBuild:
    r"""The suite's ZINC: ``splits`` (``train``/``val``/``test`` datasets with :data:`ZINC_PE`) in
    the temporary data root ``root`` (kept alive by ``_tmp``), built in ``seconds`` of wall time and
    ``cpu_seconds`` of CPU time (this process and its featurising workers together)."""

    root: str
    splits: dict[str, InMemoryDataset]
    seconds: float
    cpu_seconds: float
    _tmp: tempfile.TemporaryDirectory


_ZINC: list[ZincBuild] = []
_GRAPHS: dict[tuple[str, int], tuple[list[Data], str]] = {}


def build_zinc() -> ZincBuild:
    r"""Builds ZINC with :data:`ZINC_PE` into a fresh temporary root, times it, and makes it the
    suite's ZINC (replacing an earlier build)."""
    from gea_graph.data import get_dataset

    tmp = tempfile.TemporaryDirectory(prefix="gea-graph-perf-")
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    splits = {split: get_dataset("zinc", root=tmp.name, split=split, pe=ZINC_PE)
              for split in ("train", "val", "test")}
    build = ZincBuild(tmp.name, splits, time.perf_counter() - t0, _cpu_seconds() - cpu0, tmp)
    _ZINC[:] = [build]
    return build


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def zinc() -> ZincBuild:
    """The suite's ZINC build (built now if no row has built it yet)."""
    return _ZINC[0] if _ZINC else build_zinc()


def _ogb_columns(rows: int, dims: list[int], generator: torch.Generator) -> Tensor:
    # [rows, len(dims)] long, column i uniform below min(4, dims[i])
    high = torch.tensor([min(4, d) for d in dims], dtype=torch.float64)
    return (torch.rand(rows, len(dims), generator=generator, dtype=torch.float64) * high).long()


def random_molecule_like(num_nodes: int, generator: torch.Generator) -> Data:
    r"""A connected, sparse, undirected graph that looks like a molecule: a random tree whose nodes
    attach to one of the few previous nodes (chains and branches), plus one ring-closing edge per
    ~12 nodes; OGB features ``x [N, 9]`` and ``edge_attr [E, 3]`` (each column below 4 and within OGB's
    vocabulary)."""
    n = max(int(num_nodes), 1)
    src: list[int] = []
    dst: list[int] = []
    for i in range(1, n):
        back = int(torch.randint(1, min(i, 3) + 1, (1,), generator=generator))
        src.append(i)
        dst.append(i - back)
    for _ in range(n // 12):
        i = int(torch.randint(5, n, (1,), generator=generator)) if n > 5 else 0
        if i >= 5:
            src.append(i)
            dst.append(i - 5)
    edge_index = to_undirected(torch.tensor([src, dst], dtype=torch.long).view(2, -1),
                               num_nodes=n)
    x = _ogb_columns(n, get_atom_feature_dims(), generator)
    edge_attr = _ogb_columns(edge_index.size(1), get_bond_feature_dims(), generator)
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, num_nodes=n)


def random_graphs(dataset: str, count: int, seed: int = 0) -> list[Data]:
    """``count`` random molecule-like graphs with ``dataset``'s node-count distribution."""
    mean, std, lo, hi = _SIZE_DIST[dataset]
    gen = torch.Generator().manual_seed(seed)
    sizes = (torch.randn(count, generator=gen) * std + mean).round().clamp(lo, hi).long()
    return [random_molecule_like(int(n), gen) for n in sizes]


def _spread(total: int, count: int) -> list[int]:
    # A fixed, spread-out selection (not the first graphs, which may be sorted by anything).
    step = max(total // count, 1)
    return [i * step for i in range(min(count, total))]


def _peptides(count: int) -> list[Data]:
    from gea_graph.data import PeptidesFunctional, availability, fetch, get_dataset, safe_pickle
    from gea_graph.data.molecules import featurize

    if availability("peptides-func") == "processed":
        ds = get_dataset("peptides-func", split="train")
        return [ds[i] for i in _spread(len(ds), count)]
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="gea-graph-perf-") as raw_dir:
        csv = fetch(PeptidesFunctional.csv_file, raw_dir)
        split = safe_pickle.load(str(fetch(PeptidesFunctional.split_file, raw_dir)))
        train = np.asarray(split["train"])
        rows = train[_spread(len(train), count)]
        table = pd.read_csv(csv).iloc[rows]
    targets = np.zeros((len(table), 1), dtype=np.float32)  # labels are not needed for timing
    return featurize(table["smiles"].tolist(), targets, str(csv))


def real_graphs(dataset: str, count: int) -> tuple[list[Data], str]:
    r"""``count`` graphs of ``dataset`` (``"ZINC"``: training split of the suite's build;
    ``"Peptides-func"``: training split) and a note: empty for real graphs, else why the random
    fallback was used. Cached per process."""
    key = (dataset, count)
    if key not in _GRAPHS:
        try:
            if dataset == "ZINC":
                ds = zinc().splits["train"]
                graphs = [ds[i] for i in _spread(len(ds), count)]
            else:
                graphs = _peptides(count)
            note = ""
        except Exception as err:  # noqa: BLE001 -- any failure means: fall back, and say so
            graphs = random_graphs(dataset, count)
            note = (f"random graphs of {dataset}'s size distribution "
                    f"(dataset unavailable: {type(err).__name__}: {err})")[:200]
        _GRAPHS[key] = (graphs, note)
    return _GRAPHS[key]


@dataclass
class LayerInput:
    r"""One mini-batch ready for a layer: float node features ``x [N, C]``, float edge features
    ``edge_attr [E, C]``, ``edge_index``, ``batch`` and ``num_graphs``; ``note`` says where the
    graphs came from."""

    dataset: str
    x: Tensor
    edge_index: Tensor
    edge_attr: Tensor
    batch: Tensor
    num_graphs: int
    note: str


def _embed(t: Tensor | None, rows: int, channels: int, gen: torch.Generator) -> Tensor:
    # Fixed random embeddings of the (categorical) input features: a sum over the columns, as
    # OGB's Atom/BondEncoder do. Float inputs go through a fixed random linear map.
    if t is None:
        return torch.randn(rows, channels, generator=gen)
    if t.dim() == 1:
        t = t.view(-1, 1)
    if t.is_floating_point():
        return t @ torch.randn(t.size(1), channels, generator=gen) / t.size(1) ** 0.5
    out = torch.zeros(t.size(0), channels)
    for col in t.t():
        table = torch.randn(int(col.max()) + 1 if col.numel() else 1, channels, generator=gen)
        out += table[col]
    return out


def layer_input(dataset: str, channels: int, device: torch.device, count: int | None = None) -> LayerInput:
    r"""The suite's mini-batch of ``dataset`` (``count`` graphs, default :data:`BATCH_GRAPHS`) with float features
    of width ``channels`` on ``device``."""
    graphs, note = real_graphs(dataset, count or BATCH_GRAPHS[dataset])
    keep = ("x", "edge_index", "edge_attr")
    batch = Batch.from_data_list([Data(**{k: g[k] for k in keep if k in g},
                                       num_nodes=g.num_nodes) for g in graphs])
    gen = torch.Generator().manual_seed(1)
    x = _embed(batch.x, batch.num_nodes, channels, gen)
    edge_attr = _embed(batch.get("edge_attr"), batch.edge_index.size(1), channels, gen)
    return LayerInput(dataset, x.to(device), batch.edge_index.to(device), edge_attr.to(device),
                      batch.batch.to(device), batch.num_graphs, note)
