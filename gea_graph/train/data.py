r"""The datasets and loaders of a recipe's ``data`` section."""
from __future__ import annotations

import importlib
import inspect
import pickle
from collections.abc import Iterable, Iterator, Sized
from typing import TYPE_CHECKING

import torch
import torch_geometric.data
from torch.utils.data import BatchSampler, Dataset, Sampler, SequentialSampler
from torch_geometric.loader import DataLoader

from gea_graph.train.recipe import DataConfig, Recipe, RecipeError

if TYPE_CHECKING:
    from torch_geometric.data import Batch

    from gea_graph.data.device import DeviceSplit

SPLITS = ("train", "val", "test")


def import_object(path: str):
    r"""``"package.module.Name"`` -> the object (a clear error when it cannot be imported)."""
    module_name, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"data.cls: cannot import {path!r}: {err}") from None


def _from_class(cfg: DataConfig) -> dict[str, Dataset]:
    from gea_graph.data.base import strict_torch_load

    cls = import_object(str(cfg.cls))
    # A recipe names a class to call with its own arguments: only dataset classes, checked before any call.
    if not (isinstance(cls, type) and issubclass(cls, torch_geometric.data.Dataset)):
        raise RecipeError(f"data.cls: {cfg.cls!r} is not a dataset class; allowed: a subclass of "
                         f"torch_geometric.data.Dataset, e.g. 'torch_geometric.datasets.TUDataset'")
    try:
        # PyG's own classes read their caches with an unsafe fallback; here every torch.load is weights-only.
        with strict_torch_load():
            return _build_from_class(cls, cfg)
    except pickle.UnpicklingError as err:
        raise ValueError(f"data.cls {cfg.cls}: a file in its data root names code or objects a dataset cache never "
                         f"holds and was not loaded ({str(err).splitlines()[0][:200]}); delete that data root's "
                         f"processed folder to rebuild it") from None


def _build_from_class(cls: type, cfg: DataConfig) -> dict[str, Dataset]:
    params = inspect.signature(cls).parameters
    kwargs = dict(cfg.options)
    if "root" in params:
        from gea_graph.data.config import data_root

        kwargs.setdefault("root", str(data_root(cfg.root) / cls.__name__))
    if cfg.pe and "pre_transform" in params:
        from gea_graph.transforms import parse_pe

        kwargs["pre_transform"] = parse_pe(cfg.pe)
    if "split" in params:
        return {split: cls(split=split, **kwargs) for split in SPLITS}
    dataset = cls(**kwargs)
    if cfg.pe and "pre_transform" not in params:
        from gea_graph.transforms import apply_many, parse_pe

        dataset = apply_many(parse_pe(cfg.pe), list(dataset))
    perm = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(cfg.split_seed)).tolist()
    n_train, n_val = int(0.8 * len(perm)), int(0.1 * len(perm))
    parts = {"train": perm[:n_train], "val": perm[n_train:n_train + n_val], "test": perm[n_train + n_val:]}
    if isinstance(dataset, list):
        return {split: [dataset[i] for i in idx] for split, idx in parts.items()}
    return {split: dataset[torch.tensor(idx)] for split, idx in parts.items()}


def load_datasets(cfg: DataConfig) -> dict[str, Dataset]:
    r"""The ``train`` / ``val`` / ``test`` datasets of a recipe.

    Built-in datasets without a validation split (TreeNeighbourMatch's train/test protocol) use the test split for
    validation too; without a labelled test split (PCQM4Mv2, whose test sets are hidden) the validation split is
    the test split, as in the GFSA paper's PCQM4Mv2 table."""
    if cfg.name is not None:
        from gea_graph.data import DATASETS, get_dataset

        available = DATASETS[cfg.name].splits if cfg.name in DATASETS else SPLITS
        names = {"train": "train",
                 "val": "val" if "val" in available else "test",
                 "test": "test" if "test" in available else "val"}
        built: dict[str, Dataset] = {}
        splits = {}
        for split, name in names.items():
            if name not in built:
                built[name] = get_dataset(cfg.name, root=cfg.root, split=name, pe=cfg.pe, **cfg.options)
            splits[split] = built[name]
    elif cfg.csv is not None:
        from gea_graph.data import MoleculeCSV

        splits = {split: MoleculeCSV(cfg.root, cfg.csv, split=split, pe=cfg.pe, **cfg.options)
                  for split in SPLITS}
    else:
        splits = _from_class(cfg)
    if cfg.subset is not None:
        splits = {split: ds[:cfg.subset] for split, ds in splits.items()}
    return splits


_CLASS_TASKS = ("graph_classification", "node_classification", "target_node")


def _targets(dataset: Dataset) -> torch.Tensor | None:
    y = getattr(dataset, "y", None) if not isinstance(dataset, list) else None
    if isinstance(dataset, list):
        ys = [d.y.reshape(-1) for d in dataset if getattr(d, "y", None) is not None]
        y = torch.cat(ys) if ys else None
    return y if isinstance(y, torch.Tensor) else None


def check_splits(splits: dict[str, Dataset], recipe: Recipe) -> None:
    r"""Refuses splits a run cannot use, naming the dataset: an empty ``train``, ``val`` or ``test`` split (a run
    would end with ``val nan``), infinite targets, and missing (NaN) targets for a classification task (regression
    and multi-label tasks mask them per target, as OGB does)."""
    label = recipe.data.csv or recipe.data.name or recipe.data.cls
    for split, dataset in splits.items():
        if len(dataset) == 0:
            raise ValueError(f"data {label}: the {split} split is empty (0 graphs); give it graphs (e.g. check "
                             f"split_fractions, the split column, or data.subset)")
        y = _targets(dataset)
        if y is None or not y.is_floating_point():
            continue
        bad = torch.isinf(y)
        if bool(bad.any()):
            rows = torch.nonzero(bad.reshape(len(y), -1).any(dim=1)).view(-1)[:5].tolist() if y.dim() else []
            raise ValueError(f"data {label}: the {split} split has infinite targets (graphs {rows}); allowed: finite "
                             f"numbers, or empty cells / NaN for a missing target")
        if recipe.model.task in _CLASS_TASKS and bool(torch.isnan(y).any()):
            rows = torch.nonzero(torch.isnan(y.reshape(len(y), -1)).any(dim=1)).view(-1)[:5].tolist()
            raise ValueError(f"data {label}: the {split} split has missing (NaN) class labels (graphs {rows}); the "
                             f"task {recipe.model.task} needs a label for every graph (missing targets are masked "
                             f"only for regression and multi-label tasks)")


class EpochSampler(Sampler[int]):
    r"""Random order that depends only on ``(seed, epoch)``: Lightning calls :meth:`set_epoch` before every epoch,
    so a run resumed from a checkpoint sees exactly the batches of an uninterrupted one. Every process of a
    distributed run draws the same order (:class:`ShardedBatchSampler` then shares it out)."""

    def __init__(self, data: Sized, seed: int) -> None:
        self.size, self.seed, self.epoch = len(data), seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return iter(torch.randperm(self.size, generator=gen).tolist())

    def __len__(self) -> int:
        return self.size


def process_world() -> tuple[int, int]:
    r"""``(rank, world size)`` of this process: from the initialised default process group of a distributed run,
    else ``(0, 1)``."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class ShardedBatchSampler(BatchSampler):
    r"""Global mini-batches of :obj:`batch_size` graphs in :obj:`sampler`'s order, each shared out among the
    :math:`W` processes of a distributed run: process :math:`r` takes graphs :math:`r, r + W, r + 2W, \ldots` of
    every global batch. So :math:`W` processes step through the same global batches as one process would (the
    recipe's batch size is the global one), and

    * the shards of an epoch are disjoint and cover the split (no graph is repeated to even them out, unlike
      :class:`~torch.utils.data.distributed.DistributedSampler`, whose repeats would count twice in a metric);
    * every process takes the same number of steps, each with at least one graph: a last global batch of fewer
      than :math:`W` graphs joins the batch before it.

    With one process this is a plain :class:`~torch.utils.data.BatchSampler` (``drop_last=False``). The rank and
    world size are read when iterating (:func:`process_world`), so the sampler can be built before the processes
    start (Lightning's DDP launchers). Lightning calls ``set_epoch`` on :attr:`sampler` before every epoch.

    Args:
        sampler (Sampler): The order of the whole split (the same in every process).
        batch_size (int): Graphs per global batch (at least the world size).
        world (tuple, optional): ``(rank, world size)``, instead of :func:`process_world`.
    """

    def __init__(self, sampler: Sampler[int] | Sized, batch_size: int, world: tuple[int, int] | None = None) -> None:
        super().__init__(sampler, batch_size, drop_last=False)
        self.world = world

    def bounds(self, size: int, processes: int) -> list[tuple[int, int]]:
        r"""``(start, end)`` of each global batch of a split of ``size`` graphs shared by ``processes``."""
        if processes > 1 and size < processes:
            raise ValueError(f"a split of {size} graphs cannot give each of {processes} processes a graph; use "
                             f"fewer processes (--devices) or more graphs (data.subset)")
        if processes > 1 and self.batch_size < processes:
            raise ValueError(f"a batch of {self.batch_size} graphs cannot give each of {processes} processes a "
                             f"graph; the batch size is the global one: make it at least {processes}")
        starts = list(range(0, size, self.batch_size))
        if len(starts) > 1 and size - starts[-1] < processes:  # too few graphs to share: join the batch before
            starts.pop()
        return list(zip(starts, starts[1:] + [size]))

    def __iter__(self) -> Iterator[list[int]]:
        rank, processes = self.world or process_world()
        order = list(self.sampler)
        for start, end in self.bounds(len(order), processes):
            yield order[start:end][rank::processes]

    def __len__(self) -> int:
        return len(self.bounds(len(self.sampler), (self.world or process_world())[1]))


def resident_splits(splits: dict[str, Dataset], setting: bool | str,
                    device: torch.device) -> dict[str, DeviceSplit | None]:
    r"""The splits that ``data.on_device`` keeps on :obj:`device` (a :class:`~gea_graph.data.device.DeviceSplit`
    each; ``None`` for a split loaded on the host). ``auto``: on a GPU, each split that takes under
    :data:`~gea_graph.data.device.ON_DEVICE_SHARE` of the free device memory and can be stored (no random
    ``transform``); never on a CPU. ``true``: every split, on any device (an error where one cannot be stored).
    A dataset serving several splits (validation = test) is stored once."""
    from gea_graph.data.device import DeviceSplit, estimated_nbytes, fits_on_device

    stored: dict[int, DeviceSplit | None] = {}
    for dataset in splits.values():
        if id(dataset) in stored or setting is False or (setting == "auto" and (
                device.type != "cuda" or not fits_on_device(estimated_nbytes(dataset), device))):
            stored.setdefault(id(dataset), None)
            continue
        try:
            split = DeviceSplit(dataset)  # on the host first: its size decides `auto`
        except (TypeError, ValueError):
            if setting is True:
                raise
            stored[id(dataset)] = None
            continue
        fits = setting is True or fits_on_device(split.nbytes, device)
        stored[id(dataset)] = split.to(device) if fits else None
    return {name: stored[id(dataset)] for name, dataset in splits.items()}


def make_loader(dataset: Dataset, batch_size: int, shuffle_seed: int | None = None, num_workers: int = 0,
                pin_memory: bool = False, resident: DeviceSplit | None = None) -> Iterable[Batch]:
    r"""A :class:`~gea_graph.data.GraphLoader` for our datasets (whole batches gathered from the store), else a PyG
    :class:`~torch_geometric.loader.DataLoader` (lists, third-party datasets), or with :obj:`resident` (the split
    kept on the device, :func:`resident_splits`) a :class:`~gea_graph.data.device.DeviceLoader` gathering there; the
    same batches every way. ``batch_size`` is the global batch: in a distributed run each process loads its share
    of every batch (:class:`ShardedBatchSampler`). Training loaders (``shuffle_seed`` given) use
    :class:`EpochSampler`, evaluation loaders the split's order."""
    from gea_graph.data import GraphLoader
    from gea_graph.data.device import DeviceLoader

    order = EpochSampler(dataset, shuffle_seed) if shuffle_seed is not None else SequentialSampler(dataset)
    if resident is not None:
        return DeviceLoader(resident, ShardedBatchSampler(order, batch_size), dataset)
    cls = GraphLoader if callable(getattr(dataset, "batch", None)) else DataLoader
    return cls(dataset, batch_sampler=ShardedBatchSampler(order, batch_size), num_workers=num_workers,
               pin_memory=pin_memory, persistent_workers=num_workers > 0)
