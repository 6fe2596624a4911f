r"""The datasets and loaders of a recipe's ``data`` section."""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator, Sized

import torch
from torch.utils.data import Dataset, Sampler
from torch_geometric.loader import DataLoader

from gea_graph.train.recipe import DataConfig

SPLITS = ("train", "val", "test")


def import_object(path: str):
    r"""``"package.module.Name"`` -> the object (a clear error when it cannot be imported)."""
    module_name, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"data.cls: cannot import {path!r}: {err}") from None


def _from_class(cfg: DataConfig) -> dict[str, Dataset]:
    cls = import_object(str(cfg.cls))
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


class EpochSampler(Sampler[int]):
    r"""Random order that depends only on ``(seed, epoch)``: Lightning calls :meth:`set_epoch` before every epoch,
    so a run resumed from a checkpoint sees exactly the batches of an uninterrupted one."""

    def __init__(self, data: Sized, seed: int) -> None:
        self.size, self.seed, self.epoch = len(data), seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return iter(torch.randperm(self.size, generator=gen).tolist())

    def __len__(self) -> int:
        return self.size


def make_loader(dataset: Dataset, batch_size: int, shuffle_seed: int | None = None,
                num_workers: int = 0) -> DataLoader:
    r"""A PyG :class:`~torch_geometric.loader.DataLoader`; training loaders (``shuffle_seed`` given) use
    :class:`EpochSampler`."""
    sampler = EpochSampler(dataset, shuffle_seed) if shuffle_seed is not None else None
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=False, num_workers=num_workers,
                      persistent_workers=num_workers > 0)
