"""Base class for our datasets: processed stores keyed by the pre-transform, built atomically and read safely.

Our datasets keep their graphs in a memory-mapped :class:`~gea_graph.data.store.GraphStore` (numpy columns and a JSON
description: nothing in it is unpickled). Every other file the toolkit reads back from a data root (the generated
trees' splits, caches) goes through :func:`load_cache`: ``torch.load(weights_only=True)`` admitting only the globals
of :data:`CACHE_GLOBALS`, with no fallback to unsafe unpickling. PyG's own :class:`~torch_geometric.data.Dataset`
reads ``pre_transform.pt`` / ``pre_filter.pt`` with ``weights_only=False`` and its ``fs.torch_load`` retries a
refused load unsafely; :class:`CachedDataset` uses neither, and :func:`strict_torch_load` covers third-party PyG
classes named by a recipe.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import os.path as osp
import pickle
import zipfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Batch, Data, Dataset
from torch_geometric.data.dataset import files_exist

from gea_graph.data.config import PathLike, data_root
from gea_graph.data.download import RawFile, fetch
from gea_graph.data.store import META, GraphStore, PackedBatch, StoreError, build_store
from gea_graph.io import (
    build_lock,
    clean_stale_temporaries,
    ensure_folder,
    exclusive_temporary,
)
from gea_graph.transforms import apply_many, parse_pe

#: The only non-tensor globals a processed cache may name: PyG's ``Data`` (the class stored beside the collated
#: dictionary). Tensors, dicts, lists, strings and numbers need no global.
CACHE_GLOBALS: tuple[Any, ...] = (Data,)

class CacheError(RuntimeError):
    """A processed cache that cannot be read safely (truncated, corrupt, or naming code to run)."""


@contextlib.contextmanager
def _only_safe_globals(allowed: Sequence[Any]) -> Iterator[None]:
    # torch.load(weights_only=True) also admits every global any library registered with add_safe_globals (PyG
    # registers classes whose constructors do work, e.g. ClusterData). Admit only ours while loading.
    registered = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    torch.serialization.add_safe_globals(list(allowed))
    try:
        yield
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(registered)


_real_torch_load = torch.load


def load_cache(path: PathLike, allowed: Sequence[Any] = CACHE_GLOBALS) -> Any:
    """Reads a file the toolkit wrote (a processed split, a cache) with ``torch.load(weights_only=True)``, admitting
    only the globals in :obj:`allowed`; never falls back to unsafe unpickling.

    Raises:
        CacheError: naming the file, why it failed and how to rebuild it, when it is missing, empty, truncated,
            corrupt or names a global outside :obj:`allowed` (nothing in it is run).
    """
    path = str(path)
    try:
        with _only_safe_globals(allowed):
            return _real_torch_load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError,
            AttributeError, TypeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if isinstance(err, pickle.UnpicklingError) or "weights_only" in str(err):
            reason = f"it names code or objects a cache never holds ({reason[:160]}); it was not loaded"
        raise CacheError(
            f"cannot read the cached file {path}: {reason}. A cache is rebuilt from the raw files when it is "
            f"missing: delete {osp.dirname(path)} (or pass force_reload=True) and run again; if the file came from "
            f"someone else, do not use that data root.") from None


@contextlib.contextmanager
def strict_torch_load() -> Iterator[None]:
    """Within the block, every ``torch.load`` call (PyG's ``pre_transform.pt`` check, ``fs.torch_load`` and its
    unsafe retry) reads with ``weights_only=True``: for third-party PyG dataset classes named by a recipe."""

    from torch_geometric.data import HeteroData

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        kwargs.pop("pickle_module", None)
        return _real_torch_load(f, map_location, *args, **kwargs)

    torch.load = load
    try:
        with _only_safe_globals((*CACHE_GLOBALS, HeteroData)):
            yield
    finally:
        torch.load = _real_torch_load


def atomic_torch_save(obj: object, path: PathLike) -> None:
    """``torch.save`` to an exclusively created temporary file in the same folder, then :func:`os.replace`: readers
    see either no file or a complete one, never a half-written cache."""
    with exclusive_temporary(path) as tmp:
        torch.save(obj, tmp)


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


def file_stamps(paths: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(path, size, modification time)`` of existing files: what identifies a build's input in its plan (a
    killed build resumes only on the same input)."""
    return [(osp.abspath(p), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths if osp.isfile(p)]


#: Graphs per chunk when a dataset's :meth:`CachedDataset.build` returns lists.
_LIST_CHUNK = 50_000


class CachedDataset(Dataset):
    r"""A PyG :class:`~torch_geometric.data.Dataset` over ``root/<folder>/raw`` and a memory-mapped
    :class:`~gea_graph.data.store.GraphStore` in ``root/<folder>/processed/<cache key>/store``, shared by every
    split (each split is a list of positions into it) and by every process that reads the dataset.

    Subclasses set :attr:`folder`, :attr:`splits`, :attr:`raw_files` and implement either :meth:`build` (one list of
    graphs per split, before any pre-transform; small datasets) or :meth:`process` with
    :func:`~gea_graph.data.store.build_store` directly (large ones, in parallel resumable chunks). With
    :meth:`build`, ``pre_filter`` and ``pre_transform`` are applied batched (:func:`gea_graph.transforms.apply_many`).
    Either way the store is written under a temporary name and renamed when complete: a build interrupted at any
    point leaves no store, only finished chunks that the next build reuses. PyG's own ``pre_transform.pt`` /
    ``pre_filter.pt`` (read unsafely by PyG) are neither written nor read: the cache key makes them redundant.

    Besides ``dataset[i]`` (one :class:`~torch_geometric.data.Data`), :meth:`batch` gathers a whole mini-batch from
    the columns at once (what :class:`~gea_graph.data.GraphLoader` uses).

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
        self.open()

    def open(self) -> None:
        """Maps the processed store and this split's positions in it."""
        try:
            self.store = GraphStore(self.store_dir)
            self.positions = self.store.split(self.split)
        except StoreError as err:
            raise CacheError(f"{err} (or pass force_reload=True)") from None

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
    def store_dir(self) -> str:
        return osp.join(self.processed_dir, "store")

    @property
    def raw_file_names(self) -> list[str]:
        return [raw.name for raw in self.raw_files]

    @property
    def processed_file_names(self) -> list[str]:
        return [osp.join("store", META)]

    # -- building -------------------------------------------------------------------------------------------------
    # Downloads and builds hold the dataset folder's build lock (gea_graph.io.build_lock): a second process
    # building the same dataset waits for the first (saying so) and then reuses its result, instead of reading
    # chunks the other one is writing or removing.
    @property
    def dataset_dir(self) -> str:
        """The dataset's folder in the data root (its raw files, its caches and its build lock)."""
        return osp.join(self.root, self.folder)

    def _download(self) -> None:
        if files_exist(self.raw_paths):
            return
        with build_lock(self.dataset_dir, f"{self.folder} in {self.root}"):
            if files_exist(self.raw_paths):  # fetched by the process waited for
                return
            ensure_folder(self.raw_dir)
            self.download()

    def _process(self) -> None:
        if not self.force_reload and files_exist(self.processed_paths):
            return
        with build_lock(self.dataset_dir, f"{self.folder} in {self.root}"):
            if not self.force_reload and files_exist(self.processed_paths):  # built by the process waited for
                return
            ensure_folder(self.processed_dir)
            clean_stale_temporaries(self.processed_dir)
            self.process()

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
        parts = [(split, i) for split in self.splits for i in range(0, max(len(built[split]), 1), _LIST_CHUNK)]

        def chunk(c: int) -> tuple[list[Data], np.ndarray, dict[str, Any]]:
            split, start = parts[c]
            data_list = built[split][start:start + _LIST_CHUNK]
            rows = np.arange(start, start + len(data_list))  # each graph's place in its split
            if self.pre_filter is not None:
                keep = [i for i, d in enumerate(data_list) if self.pre_filter(d)]
                data_list, rows = [data_list[i] for i in keep], rows[keep]
            return apply_many(self.pre_transform, data_list, desc=f"{self.folder} {split}"), rows, {"split": split}

        def split_positions(rows: np.ndarray, reports: list[dict[str, Any]], counts: list[int]
                            ) -> dict[str, np.ndarray]:
            ends = np.cumsum(counts)
            out: dict[str, list[np.ndarray]] = {split: [] for split in self.splits}
            for report, end, count in zip(reports, ends, counts):
                out[report["split"]].append(np.arange(end - count, end, dtype=np.int64))
            return {split: np.concatenate(v) if v else np.zeros(0, np.int64) for split, v in out.items()}

        plan = {"dataset": self.folder, "files": file_stamps(self.raw_paths), "key": osp.basename(self.processed_dir)}
        build_store(self.store_dir, len(parts), chunk, plan=plan, workers=1, splits=split_positions,
                    desc=f"{self.folder}: store")

    # A dataset pickles without its graphs (DataLoader workers started by spawn, DDP ranks): the copy maps the store.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("store", "positions", "_indices_array")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.open()

    # -- access ---------------------------------------------------------------------------------------------------
    def len(self) -> int:
        return len(self.positions)

    def get(self, idx: int) -> Data:
        return self.store.graph(int(self.positions[idx]))

    def _store_index(self, index: Sequence[int] | np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if self._indices is not None:  # a subset (dataset[...]): its indices as an array, converted once
            cached = self.__dict__.get("_indices_array")
            if cached is None or cached[0] is not self._indices:
                cached = (self._indices, np.asarray(self._indices, dtype=np.int64))
                self.__dict__["_indices_array"] = cached
            index = cached[1][index]
        return np.asarray(self.positions[index], dtype=np.int64)

    def packed_batch(self, index: Sequence[int] | np.ndarray) -> PackedBatch | None:
        """:meth:`batch` in the packed form a DataLoader worker sends (:obj:`None` where :meth:`batch` builds graph
        by graph)."""
        if self.transform is not None or getattr(self, "store", None) is None:
            return None
        return self.store.packed_batch(self._store_index(index))

    def num_nodes_per_graph(self) -> np.ndarray:
        """Nodes of each graph of this dataset ``[len(self)]``, read from the store without building graphs."""
        return np.asarray(self.store.num_nodes[self._store_index(np.arange(len(self)))], dtype=np.int64)

    def batch(self, index: Sequence[int] | np.ndarray) -> Batch:
        """Graphs :obj:`index` of this dataset as one :class:`~torch_geometric.data.Batch`, equal to
        ``Batch.from_data_list([self[i] for i in index])`` but gathered column by column
        (:meth:`GraphStore.batch <gea_graph.data.store.GraphStore.batch>`); with a :obj:`transform`, graph by
        graph."""
        if self.transform is not None or getattr(self, "store", None) is None:
            return Batch.from_data_list([self[int(i)] for i in np.asarray(index).reshape(-1)])
        return self.store.batch(self._store_index(index))

    def __getattr__(self, key: str) -> Any:
        # dataset.y, dataset.x ...: a whole column of this split (as InMemoryDataset gives), gathered from the store
        store = self.__dict__.get("store")
        if store is not None and key in store.fields:
            return store.values(key, self._store_index(np.arange(len(self))))
        raise AttributeError(f"'{self.__class__.__name__}' object has no attribute '{key}'")

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({len(self)})"

