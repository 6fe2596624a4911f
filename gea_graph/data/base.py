"""Base class for our datasets: processed caches keyed by the pre-transform, written atomically and read safely.

Every file the toolkit reads back from a data root (processed splits, caches) goes through :func:`load_cache`:
``torch.load(weights_only=True)`` admitting only the globals of :data:`CACHE_GLOBALS`, with no fallback to unsafe
unpickling. PyG's own :class:`~torch_geometric.data.Dataset` reads ``pre_transform.pt`` / ``pre_filter.pt`` with
``weights_only=False`` and its ``fs.torch_load`` retries a refused load unsafely; :class:`SafeCache` replaces both
code paths for our datasets, and :func:`strict_torch_load` covers third-party PyG classes named by a recipe.
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

import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.data.dataset import files_exist

from gea_graph.data.config import PathLike, data_root
from gea_graph.data.download import RawFile, fetch
from gea_graph.data.files import clean_stale_temporaries, exclusive_temporary
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


class SafeCache:
    """Mixin for a PyG :class:`~torch_geometric.data.InMemoryDataset` whose processed folder is keyed by its
    pre-transform (:func:`cache_key`): replaces PyG's ``_process`` (which unpickles ``pre_transform.pt`` and
    ``pre_filter.pt`` unsafely; the key makes them redundant, so they are neither read nor written) and ``load``
    (whose ``fs.torch_load`` falls back to unsafe unpickling) with :func:`load_cache`. Stale temporary files of a
    killed build are removed before the next build."""

    def _process(self) -> None:
        if not self.force_reload and files_exist(self.processed_paths):
            return
        os.makedirs(self.processed_dir, exist_ok=True)
        clean_stale_temporaries(self.processed_dir)
        self.process()

    def load(self, path: str, data_cls: type = Data) -> None:
        stored = load_cache(path)
        if not (isinstance(stored, tuple) and len(stored) == 3 and isinstance(stored[0], dict)
                and stored[2] in CACHE_GLOBALS):
            raise CacheError(f"cannot read the cached file {path}: it is not a processed split of this toolkit. "
                             f"Delete {osp.dirname(path)} and run again to rebuild it.")
        data, self.slices, data_cls = stored
        self.data = data_cls.from_dict(data)


def atomic_torch_save(obj: object, path: PathLike) -> None:
    """``torch.save`` to an exclusively created temporary file in the same folder, then :func:`os.replace`: readers
    see either no file or a complete one, never a half-written cache."""
    with exclusive_temporary(path) as tmp:
        torch.save(obj, tmp)


def save_collated(data_list: Sequence[Data], path: PathLike) -> None:
    """Collates graphs into PyG's in-memory storage and saves it atomically (PyG's own ``save`` writes in place)."""
    if not data_list:  # PyG cannot collate nothing; an empty slice dict reads back as a dataset of length 0
        atomic_torch_save((Data().to_dict(), {}, Data), path)
        return
    data, slices = InMemoryDataset.collate(data_list)
    atomic_torch_save((data.to_dict(), slices, Data), path)


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


class CachedDataset(SafeCache, InMemoryDataset):
    r"""An :class:`~torch_geometric.data.InMemoryDataset` over ``root/<folder>/raw`` and
    ``root/<folder>/processed/<cache key>/<split>.pt``.

    Subclasses set :attr:`folder`, :attr:`splits`, :attr:`raw_files` and implement :meth:`build`, which turns the raw
    files into one list of graphs per split *without* any pre-transform. This class then applies ``pre_filter`` and
    ``pre_transform`` (batched, see :func:`gea_graph.transforms.apply_many`) and writes every split atomically, only
    after all of them are built: a build interrupted at any point leaves no cache and is simply redone next time.
    Caches are read back with :func:`load_cache` only (see :class:`SafeCache`).

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
