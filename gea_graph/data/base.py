"""Base class for our datasets: processed caches keyed by the pre-transform, written atomically."""

from __future__ import annotations

import hashlib
import os
import os.path as osp
from collections.abc import Callable, Sequence

import torch
from torch_geometric.data import Data, InMemoryDataset

from gea_graph.data.config import PathLike, data_root
from gea_graph.data.download import RawFile, fetch
from gea_graph.transforms import apply_many, parse_pe


def atomic_torch_save(obj: object, path: PathLike) -> None:
    """``torch.save`` to a temporary name in the same folder, then :func:`os.replace`: readers see either no file or
    a complete one, never a half-written cache."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if osp.exists(tmp):
            os.unlink(tmp)


def save_collated(data_list: Sequence[Data], path: PathLike) -> None:
    """Collates graphs into PyG's in-memory storage and saves it atomically (PyG's own ``save`` writes in place)."""
    if not data_list:  # PyG cannot collate nothing; an empty slice dict reads back as a dataset of length 0
        atomic_torch_save((Data().to_dict(), {}, Data), path)
        return
    data, slices = InMemoryDataset.collate(data_list)
    atomic_torch_save((data.to_dict(), slices, data.__class__), path)


def cache_key(pre_transform: Callable | None, pre_filter: Callable | None = None, extra: str = "") -> str:
    """Name of the processed-cache folder for a pre-transform / pre-filter configuration.

    ``plain`` without either; otherwise ``pe-<10 hex digits>`` hashed from their ``repr`` (our transforms' reprs
    list every setting), so different PE settings never share a cache.
    """
    text = "|".join([repr(pre_transform) if pre_transform is not None else "",
                     repr(pre_filter) if pre_filter is not None else "", extra])
    if text == "||":
        return "plain"
    return "pe-" + hashlib.sha1(text.encode()).hexdigest()[:10]


class CachedDataset(InMemoryDataset):
    r"""An :class:`~torch_geometric.data.InMemoryDataset` over ``root/<folder>/raw`` and
    ``root/<folder>/processed/<cache key>/<split>.pt``.

    Subclasses set :attr:`folder`, :attr:`splits`, :attr:`raw_files` and implement :meth:`build`, which turns the raw
    files into one list of graphs per split *without* any pre-transform. This class then applies ``pre_filter`` and
    ``pre_transform`` (batched, see :func:`gea_graph.transforms.apply_many`) and writes every split atomically, only
    after all of them are built: a build interrupted at any point leaves no cache and is simply redone next time.

    Args:
        root (str, optional): Data root (default: :func:`gea_graph.data.config.data_root`).
        split (str): Which split to load.
        transform, pre_transform, pre_filter: As in PyG.
        pe (str, optional): Shorthand for a positional-encoding ``pre_transform``, e.g. ``"lap:8,rw:20"``
            (:func:`gea_graph.transforms.parse_pe`); applied after :obj:`pre_transform` when both are given.
        force_reload (bool, optional): Rebuild the cache. (default: :obj:`False`)
    """

    folder: str = ""
    splits: Sequence[str] = ("train", "val", "test")
    raw_files: Sequence[RawFile] = ()

    def __init__(self, root: PathLike | None = None, split: str = "train", transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None,
                 pe: str | None = None, force_reload: bool = False) -> None:
        split = self._canonical_split(split)
        self.split = split
        pe_transform = parse_pe(pe)
        if pe_transform is not None:
            from torch_geometric.transforms import Compose
            pre_transform = pe_transform if pre_transform is None else Compose([pre_transform, pe_transform])
        super().__init__(str(data_root(root)), transform, pre_transform, pre_filter, force_reload=force_reload)
        self.load(osp.join(self.processed_dir, f"{split}.pt"))

    # -- layout ---------------------------------------------------------------------------------------------------
    @classmethod
    def _canonical_split(cls, split: str) -> str:
        if split not in cls.splits:
            raise ValueError(f"{cls.__name__} has splits {list(cls.splits)}, not {split!r}")
        return split

    def cache_extra(self) -> str:
        """Extra settings (besides the pre-transform) that change the processed graphs; part of the cache key."""
        return ""

    @property
    def raw_dir(self) -> str:
        return osp.join(self.root, self.folder, "raw")

    @property
    def processed_dir(self) -> str:
        return osp.join(self.root, self.folder, "processed",
                        cache_key(self.pre_transform, self.pre_filter, self.cache_extra()))

    @property
    def raw_file_names(self) -> list[str]:
        return [raw.name for raw in self.raw_files]

    @property
    def processed_file_names(self) -> list[str]:
        return [f"{split}.pt" for split in self.splits]

    # -- building -------------------------------------------------------------------------------------------------
    def download(self) -> None:
        for raw in self.raw_files:
            fetch(raw, self.raw_dir)

    def raw_path(self, name: str) -> str:
        """Path of a raw file, fetched (and MD5-checked) when it is one of :attr:`raw_files`."""
        for raw in self.raw_files:
            if raw.name == name:
                return str(fetch(raw, self.raw_dir))
        return osp.join(self.raw_dir, name)

    def build(self) -> dict[str, list[Data]]:
        """Returns the graphs of every split, before any pre-transform."""
        raise NotImplementedError

    def process(self) -> None:
        built = self.build()
        out = {}
        for split in self.splits:
            data_list = built[split]
            if self.pre_filter is not None:
                data_list = [d for d in data_list if self.pre_filter(d)]
            out[split] = apply_many(self.pre_transform, data_list, desc=f"{self.folder} {split}")
        os.makedirs(self.processed_dir, exist_ok=True)
        for split, data_list in out.items():
            self.save(data_list, osp.join(self.processed_dir, f"{split}.pt"))

    @classmethod
    def save(cls, data_list: Sequence[Data], path: str) -> None:
        save_collated(data_list, path)
