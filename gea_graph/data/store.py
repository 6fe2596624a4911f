r"""Columnar graph storage on disk: compact integer dtypes, memory-mapped, built in resumable chunks.

A *store* is a folder of ``.npy`` columns and one ``meta.json``::

    store/meta.json          format version, number of graphs, and for every field its level and dtypes
    store/num_nodes.npy      [G] nodes per graph (smallest unsigned dtype)
    store/ptr.<level>.npy    [G + 1] int64 offsets of each level ("nodes", "edges", "pairs", ...) into its columns
    store/<field>.npy        the field's per-graph values concatenated along their PyG concatenation dimension
                             (moved to the front: ``edge_index`` is stored [E, 2], graph-local), in the smallest
                             integer dtype that holds every value (``uint8`` atom features, ``int8`` path edge ids)
    store/<field>.bytes      text fields (SMILES): UTF-8, offsets in ``ptr.<field>.npy``

Columns are opened with ``numpy.load(mmap_mode="r")``: every process on a machine (DataLoader workers, DDP ranks)
reads the same page-cache copy, and a :class:`GraphStore` pickles as its path, so no process holds a private copy of
the dataset. Within a process, the stores of a dataset's splits share one mapping of each file. Reading converts
integers back to the dtype the graphs had (``int64`` for PyG's indices).

``spd_index`` of :class:`~gea_graph.transforms.ShortestPathDistance` (all ordered node pairs, row-major) is not
stored but recomputed from ``num_nodes``; the other fields are stored as the graphs hold them.

Building (:func:`build_store`) runs chunks of graphs in worker processes; each chunk is written to
``<store>.chunks/`` under a temporary name and renamed when complete, and the store itself is assembled under a
temporary folder renamed into place last. A build killed at any point restarts from its finished chunks and never
leaves a store that looks complete but is not.
"""

from __future__ import annotations

import json
import mmap
import os
import os.path as osp
import re
import shutil
import stat
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Batch, Data
from tqdm.auto import tqdm

from gea_graph.data.config import PathLike
from gea_graph.io import (
    atomic_write,
    clean_stale_temporaries,
    ensure_folder,
    temporary_folder,
    write_text,
)

FORMAT_VERSION = 1
META = "meta.json"
#: Fields recomputed from ``num_nodes`` instead of stored (see the module docstring).
DERIVED = ("spd_index",)

_INT_DTYPES = (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.int64)


class StoreError(RuntimeError):
    """A store that cannot be read (missing or inconsistent files) or graphs that cannot be stored."""


def smallest_int_dtype(low: int, high: int) -> np.dtype:
    """The smallest numpy integer dtype holding every value in ``[low, high]``."""
    for dtype in _INT_DTYPES:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return np.dtype(dtype)
    raise StoreError(f"values in [{low}, {high}] fit no 64-bit integer dtype")


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise StoreError(f"unknown torch dtype {name!r} in a store's meta.json")
    return dtype


def _numpy_of(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _all_pairs(num_nodes: np.ndarray) -> np.ndarray:
    """Graph-local ``spd_index`` of graphs with :obj:`num_nodes` nodes, concatenated: ``[2, sum N^2]`` int64."""
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    if not num_nodes.size or not num_nodes.max(initial=0):
        return np.zeros((2, 0), np.int64)
    if num_nodes.max() <= len(_PAIRS) - 1:  # molecules: copies of cached blocks instead of a division per pair
        return np.concatenate([_PAIRS[n] for n in num_nodes.tolist()], axis=1)
    sizes = num_nodes * num_nodes
    n = np.repeat(num_nodes, sizes)
    pos = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.stack(np.divmod(pos, n))


#: The row-major pairs ``[2, n^2]`` of every graph size n = 0..64.
_PAIRS = [np.stack(np.divmod(np.arange(n * n, dtype=np.int64), max(n, 1))) for n in range(65)]


# -- one chunk of graphs as columns --------------------------------------------------------------------------------
@dataclass
class Columns:
    """One chunk of graphs as columns: ``arrays`` holds ``num_nodes`` ``[G]``, each field's values ``<key>``
    (concatenation dimension first) and its per-graph sizes ``<key>.count`` ``[G]``; ``fields`` describes each
    field (``kind`` tensor/text/derived, ``cat_dim``, ``inc`` = offset by node counts when batched, ``dtype``
    (torch), ``shape`` (the other dimensions), ``low``/``high`` for integers). Built by :func:`graphs_to_columns`
    from :class:`~torch_geometric.data.Data` objects or by :meth:`add` directly from arrays."""

    num_nodes: np.ndarray
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.num_nodes = np.asarray(self.num_nodes, dtype=np.int64)
        self.arrays["num_nodes"] = self.num_nodes

    def add(self, key: str, values: np.ndarray, counts: np.ndarray, dtype: torch.dtype, cat_dim: int = 0,
            inc: bool = False) -> None:
        """Field :obj:`key`: :obj:`values` with the concatenation dimension first (``[sum counts, ...]``), as a
        graph holds it in dtype :obj:`dtype` along dimension :obj:`cat_dim`."""
        values = np.asarray(values)
        spec: dict[str, Any] = {"kind": "tensor", "cat_dim": cat_dim, "inc": inc, "dtype": str(dtype),
                                "shape": list(values.shape[1:])}
        if values.dtype.kind in "iu":
            spec["low"] = int(values.min()) if values.size else 0
            spec["high"] = int(values.max()) if values.size else 0
        self.arrays[key] = values
        self.arrays[f"{key}.count"] = np.asarray(counts, dtype=np.int64)
        self.fields[key] = spec

    def add_text(self, key: str, values: Sequence[str]) -> None:
        encoded = [v.encode("utf-8") for v in values]
        self.arrays[key] = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        self.arrays[f"{key}.count"] = np.array([len(b) for b in encoded], dtype=np.int64)
        self.fields[key] = {"kind": "text"}

    def add_derived(self, key: str) -> None:
        if key not in DERIVED:
            raise StoreError(f"{key!r} is not a derived field; derived fields are {DERIVED}")
        self.fields[key] = {"kind": "derived"}


def graphs_to_columns(graphs: Sequence[Data]) -> Columns:
    """Concatenates graphs field by field (see :class:`Columns`).

    Raises:
        StoreError: when graphs hold different fields, a field's other dimensions or dtype differ between graphs, or
            a value is neither a tensor nor a string.
    """
    out = Columns(np.array([int(g.num_nodes) for g in graphs], dtype=np.int64))
    if not graphs:
        return out
    keys = sorted(k for k in graphs[0].keys() if k != "num_nodes")  # noqa: SIM118 (iterating Data yields pairs)
    for i, g in enumerate(graphs):
        other = sorted(k for k in g.keys() if k != "num_nodes")  # noqa: SIM118
        if other != keys:
            raise StoreError(f"graph {i} has the fields {other}, graph 0 has {keys}: every graph of a dataset must "
                             f"hold the same fields")
    for key in keys:
        first = graphs[0][key]
        if key in DERIVED and _is_all_pairs([g[key] for g in graphs], out.num_nodes):
            out.add_derived(key)
            continue
        if isinstance(first, str):
            values = [g[key] for g in graphs]
            if not all(isinstance(v, str) for v in values):
                raise StoreError(f"field {key!r} holds a string in graph 0 but not in every graph")
            out.add_text(key, values)
            continue
        if not isinstance(first, torch.Tensor):
            raise StoreError(f"field {key!r} is a {type(first).__name__}; a store holds tensors and strings only")
        cat_dim = graphs[0].__cat_dim__(key, first)
        cat_dim = cat_dim + first.dim() if cat_dim < 0 else cat_dim
        inc = graphs[0].__inc__(key, first)
        if not (isinstance(inc, int) and inc in (0, int(graphs[0].num_nodes))) and not torch.is_tensor(inc):
            raise StoreError(f"field {key!r} is offset by {inc!r} when batched; a store supports offsets by the "
                             f"node count (keys containing 'index') or none")
        parts, counts = [], np.empty(len(graphs), dtype=np.int64)
        for i, g in enumerate(graphs):
            value = g[key]
            if not isinstance(value, torch.Tensor) or value.dtype != first.dtype or value.dim() != first.dim():
                raise StoreError(f"field {key!r}: graph {i} holds {type(value).__name__} "
                                 f"{getattr(value, 'dtype', '')} of {getattr(value, 'dim', lambda: '?')()} dims, "
                                 f"graph 0 a {first.dtype} tensor of {first.dim()} dims")
            value = value.movedim(cat_dim, 0) if cat_dim else value
            counts[i] = value.size(0)
            parts.append(_numpy_of(value))
        shapes = {p.shape[1:] for p in parts}
        if len(shapes) > 1:
            raise StoreError(f"field {key!r}: its dimensions other than the concatenation dimension differ between "
                             f"graphs ({sorted(shapes)[:3]})")
        out.add(key, np.concatenate(parts), counts, first.dtype, cat_dim, key_is_index(inc))
    return out


def _is_all_pairs(values: Sequence[Any], num_nodes: np.ndarray) -> bool:
    if not all(isinstance(v, torch.Tensor) and v.dim() == 2 and v.size(0) == 2 for v in values):
        return False
    if [v.size(1) for v in values] != (num_nodes * num_nodes).tolist():
        return False
    return bool(np.array_equal(np.concatenate([_numpy_of(v) for v in values], axis=1), _all_pairs(num_nodes)))


def key_is_index(inc: Any) -> bool:
    return bool(inc) if not torch.is_tensor(inc) else bool(inc.any())


# -- building ------------------------------------------------------------------------------------------------------
ChunkFn = Callable[[int], tuple["list[Data] | Columns", np.ndarray, dict[str, Any]]]
SplitFn = Callable[[np.ndarray, list[dict[str, Any]], list[int]], dict[str, np.ndarray]]
_JOB: ChunkFn | None = None


def _write_chunk(chunk_dir: str, index: int) -> dict[str, Any]:
    assert _JOB is not None
    graphs, rows, report = _JOB(index)
    columns = graphs if isinstance(graphs, Columns) else graphs_to_columns(graphs)
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) != len(columns.num_nodes):
        raise StoreError(f"chunk {index} returned {len(columns.num_nodes)} graphs but {len(rows)} row numbers")
    arrays, fields = dict(columns.arrays), columns.fields
    arrays["__rows__"] = rows
    with atomic_write(osp.join(chunk_dir, f"{index:06d}.npz"), "wb") as f:
        np.savez(f, __fields__=np.frombuffer(json.dumps(fields).encode(), dtype=np.uint8),
                 __report__=np.frombuffer(json.dumps(report).encode(), dtype=np.uint8), **arrays)
    return report


def _read_json(z: Any, key: str) -> Any:
    return json.loads(bytes(z[key]).decode())


def available_cpus() -> int:
    r"""The CPUs this process may run on: its affinity (under Slurm or ``taskset``, fewer than the machine's
    ``os.cpu_count()``), where the platform reports one."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def build_workers() -> int:
    r"""Processes of a dataset build: ``$GEA_GRAPH_WORKERS``, else :func:`available_cpus`."""
    given = os.environ.get("GEA_GRAPH_WORKERS")
    return int(given) if given is not None else available_cpus()


#: Fewest rows of a build chunk by default: below it, a chunk's file and its worker's start cost more than its rows.
MIN_CHUNK_ROWS = 1_000


def chunk_rows_for(total: int, largest: int, workers: int | None = None) -> int:
    r"""Rows per chunk of a build of :obj:`total` rows on :obj:`workers` processes (default :func:`build_workers`):
    at most :obj:`largest` (each worker's memory), and few enough that every worker gets about four chunks, so that
    none idles while another finishes a large one, but at least :data:`MIN_CHUNK_ROWS`. Chunks change only the
    order of work: the store holds the same graphs for any chunk size."""
    workers = build_workers() if workers is None else workers
    return max(1, min(largest, max(MIN_CHUNK_ROWS, -(-total // (4 * max(workers, 1))))))


def build_store(path: PathLike, num_chunks: int, make_chunk: ChunkFn, plan: dict[str, Any], splits: SplitFn,
                workers: int | None = None, desc: str = "build") -> list[dict[str, Any]]:
    r"""Builds the store at :obj:`path` from :obj:`num_chunks` chunks of graphs and returns the chunks' reports.

    ``make_chunk(i)`` returns chunk ``i``'s graphs (a list of :class:`~torch_geometric.data.Data`, or
    :class:`Columns`), their row numbers in the raw input (``[G_i]``, kept in the store
    as :attr:`GraphStore.rows`) and a small JSON-serialisable report. ``splits(rows, reports, counts)`` receives
    all rows, the reports and the number of graphs of each chunk and returns, per split name, the positions of the
    split's graphs in the store (in the split's order), saved beside the columns. Chunks run in :obj:`workers` forked
    processes (default ``$GEA_GRAPH_WORKERS``, else
    the number of CPUs), are written to ``<path>.chunks/NNNNNN.npz`` atomically, and are skipped when a previous,
    killed build of the same :obj:`plan` (any JSON-serialisable description of the input and settings) finished
    them. The chunks are then merged column by column, each column cast once to the smallest dtype that holds the
    values of every chunk, into a temporary folder that is renamed to :obj:`path` at the end; the chunks are then
    removed.
    """
    global _JOB
    path = osp.abspath(str(path))
    chunk_dir = path + ".chunks"
    ensure_folder(chunk_dir)
    clean_stale_temporaries(osp.dirname(path))
    clean_stale_temporaries(chunk_dir)
    plan_path = osp.join(chunk_dir, "plan.json")
    plan = json.loads(json.dumps({**plan, "num_chunks": num_chunks, "format": FORMAT_VERSION}))  # tuples -> lists
    if osp.exists(plan_path):
        with open(plan_path) as f:
            if json.load(f) != plan:  # other input or settings: nothing of that build can be reused
                shutil.rmtree(chunk_dir)
                ensure_folder(chunk_dir)
    if not osp.exists(plan_path):
        write_text(plan_path, json.dumps(plan, sort_keys=True))
    todo = [i for i in range(num_chunks) if not osp.exists(osp.join(chunk_dir, f"{i:06d}.npz"))]
    workers = build_workers() if workers is None else workers
    bar = tqdm(total=num_chunks, initial=num_chunks - len(todo), desc=desc, leave=False, disable=num_chunks < 4)
    _JOB = make_chunk
    try:
        if workers <= 1 or len(todo) <= 1:
            for i in todo:
                _write_chunk(chunk_dir, i)
                bar.update(1)
        else:
            # fork: workers inherit the job (and its inputs) without pickling; each task is one chunk number.
            with ProcessPoolExecutor(min(workers, len(todo)), mp_context=get_context("fork")) as pool:
                for _ in pool.map(_write_chunk, [chunk_dir] * len(todo), todo):
                    bar.update(1)
    finally:
        _JOB = None
        bar.close()
    reports = _merge(chunk_dir, num_chunks, path, splits)
    shutil.rmtree(chunk_dir)
    return reports


def _merge(chunk_dir: str, num_chunks: int, path: str, splits: SplitFn) -> list[dict[str, Any]]:
    files = [osp.join(chunk_dir, f"{i:06d}.npz") for i in range(num_chunks)]
    reports, chunk_fields, counts = [], [], {}
    fields: dict[str, dict[str, Any]] = {}
    for file in files:  # pass 1: what every chunk holds, and every per-graph count
        with np.load(file) as z:
            reports.append(_read_json(z, "__report__"))
            these = _read_json(z, "__fields__")
            chunk_fields.append(these)
            for name in z.files:
                if name in ("num_nodes", "__rows__") or name.endswith(".count"):
                    counts.setdefault(name, []).append(z[name])
        if not these:
            continue
        for key, spec in these.items():
            if key not in fields:
                fields[key] = dict(spec)
                continue
            known = fields[key]
            same = {k: v for k, v in spec.items() if k not in ("low", "high")} == \
                {k: v for k, v in known.items() if k not in ("low", "high")}
            if not same:
                raise StoreError(f"field {key!r} differs between chunks ({known} vs {spec}) in {file}")
            if "low" in spec:
                known["low"], known["high"] = min(known["low"], spec["low"]), max(known["high"], spec["high"])
    nonempty = [f for f in chunk_fields if f]
    if any(sorted(f) != sorted(fields) for f in nonempty):
        raise StoreError(f"the chunks in {chunk_dir} hold different fields; delete that folder and build again")
    num_nodes = np.concatenate(counts.get("num_nodes", [np.zeros(0, np.int64)]))
    with temporary_folder(path) as tmp:
        _save(osp.join(tmp, "num_nodes.npy"), num_nodes.astype(smallest_int_dtype(0, int(num_nodes.max(initial=0)))))
        rows = np.concatenate(counts["__rows__"])
        _save(osp.join(tmp, "rows.npy"), rows.astype(smallest_int_dtype(int(rows.min(initial=0)),
                                                                        int(rows.max(initial=0)))))
        for name, positions in splits(rows, reports, [len(c) for c in counts["__rows__"]]).items():
            positions = np.asarray(positions, dtype=np.int64)
            if positions.size and (positions.min() < 0 or positions.max() >= rows.size):
                raise StoreError(f"split {name!r} has positions outside the store's {rows.size} graphs")
            _save(osp.join(tmp, f"split.{name}.npy"),
                  positions.astype(smallest_int_dtype(0, int(positions.max(initial=0)))))
        levels: dict[str, np.ndarray] = {}
        meta_fields = {}
        # Fields that name a level first ("edges", "pairs"), so that level names do not depend on field order.
        for key in sorted(fields, key=lambda k: (k not in _LEVEL_NAMES, k)):
            spec = fields[key]
            if spec["kind"] == "derived":
                continue
            count = np.concatenate(counts[f"{key}.count"])
            level = _level_of(key, count, num_nodes, levels)
            entry = {**spec, "level": level}
            if spec["kind"] == "text":
                entry["file"] = f"{key}.bytes"
                _copy_columns(files, key, osp.join(tmp, entry["file"]), np.uint8, (), int(count.sum()), raw=True)
            else:
                store_dtype = np.dtype(_numpy_dtype(spec))
                if "low" in spec:
                    store_dtype = smallest_int_dtype(spec["low"], spec["high"])
                entry["store_dtype"] = store_dtype.str
                entry["file"] = f"{key}.npy"
                _copy_columns(files, key, osp.join(tmp, entry["file"]), store_dtype, tuple(spec["shape"]),
                              int(count.sum()))
            meta_fields[key] = entry
        for level, count in levels.items():
            ptr = np.zeros(len(count) + 1, dtype=np.int64)
            np.cumsum(count, out=ptr[1:])
            _save(osp.join(tmp, f"ptr.{level}.npy"), ptr)
        meta = {"format": FORMAT_VERSION, "num_graphs": int(num_nodes.size), "fields": meta_fields,
                "derived": sorted(k for k, spec in fields.items() if spec["kind"] == "derived")}
        write_text(osp.join(tmp, META), json.dumps(meta, indent=1, sort_keys=True))
    return reports


def _save(path: str, array: np.ndarray) -> None:
    with atomic_write(path, "wb") as f:
        np.save(f, array)


def _numpy_dtype(spec: dict[str, Any]) -> np.dtype:
    return torch.empty(0, dtype=_torch_dtype(spec["dtype"])).numpy().dtype


_LEVEL_NAMES = {"edge_index": "edges", "spd": "pairs"}


def _level_of(key: str, count: np.ndarray, num_nodes: np.ndarray, levels: dict[str, np.ndarray]) -> str:
    """Name of the offsets a field shares with others of equal per-graph sizes: ``nodes`` for node-level fields,
    then the first field's name of each other size pattern (``edges`` for ``edge_index``)."""
    if np.array_equal(count, num_nodes):
        levels.setdefault("nodes", num_nodes)
        return "nodes"
    for name, known in levels.items():
        if np.array_equal(count, known):
            return name
    name = _LEVEL_NAMES.get(key, key)
    if np.all(count == 1):
        name = "graphs"
    levels[name] = count
    return name


def _copy_columns(files: Sequence[str], key: str, out: str, dtype: np.dtype, shape: tuple[int, ...], total: int,
                  raw: bool = False) -> None:
    if raw:
        with atomic_write(out, "wb") as f:
            for file in files:
                with np.load(file) as z:
                    if key in z.files:
                        f.write(z[key].tobytes())
        return
    # Streamed with write(), not through a writable memory map: the pages written never count as this process's
    # memory, so a build's peak memory stays one chunk's worth however large the dataset.
    at = 0
    with atomic_write(out, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                 "fortran_order": False, "shape": (total, *shape)})
        for file in files:
            with np.load(file) as z:
                if key not in z.files:
                    continue
                part = np.ascontiguousarray(z[key].astype(dtype, copy=False))
                f.write(part.data)
                at += len(part)
    if at != total:
        raise StoreError(f"field {key!r}: the chunks hold {at} rows, their counts say {total}")


# -- reading -------------------------------------------------------------------------------------------------------
def _gather_index(ptr: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the rows of graphs :obj:`index` in a column with offsets :obj:`ptr` (in :obj:`index`'s order)
    and each graph's row count."""
    starts = ptr[index]
    counts = ptr[index + 1] - starts
    total = int(counts.sum())
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64), counts


class _Packer:
    """Copies arrays into one byte buffer (8-byte aligned) and records where each one lies."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []

    def add(self, array: np.ndarray) -> int:
        self.arrays.append(array)
        return len(self.arrays) - 1

    def finish(self) -> tuple[torch.Tensor, list[tuple[int, str, tuple[int, ...]]]]:
        layout, total = [], 0
        for array in self.arrays:
            total = -(-total // 8) * 8
            layout.append((total, array.dtype.str, array.shape))
            total += array.nbytes
        buffer = torch.empty(max(total, 8), dtype=torch.uint8)
        raw = buffer.numpy()
        for array, (start, _, _) in zip(self.arrays, layout):
            raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)[...] = array
        return buffer, layout


@dataclass
class PackedBatch:
    """A mini-batch as one byte buffer and its layout: what a DataLoader worker sends to the main process.

    Its one tensor crosses to the main process as one shared-memory block (PyTorch would otherwise give each of
    the batch's ~40 tensors a block of its own, which costs more than gathering the batch), and :meth:`unpack` turns
    it into the :class:`~torch_geometric.data.Batch` without copying: every tensor is a view of the buffer."""

    buffer: torch.Tensor
    layout: list[tuple[int, str, tuple[int, ...]]]
    tensors: dict[str, tuple[int, int, int | None]]
    texts: dict[str, list[str]]
    batch_vector: int
    node_ptr: int
    num_nodes: list[int]

    def pin_memory(self) -> PackedBatch:
        """This batch with its buffer in page-locked memory, for fast (and ``non_blocking``) copies to a GPU: one
        copy into one pinned block, however many fields the batch has. A ``DataLoader`` with ``pin_memory=True``
        calls it; the tensors of :meth:`unpack` are then views of pinned memory."""
        return replace(self, buffer=self.buffer.pin_memory())

    def unpack(self) -> Batch:
        raw = self.buffer
        views = [raw[start:start + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize]
                 .view(_TORCH_OF[np.dtype(dtype)]).view(shape) for start, dtype, shape in self.layout]
        size = len(self.num_nodes)
        out = Batch(_base_cls=Data)
        slices: dict[str, torch.Tensor] = {}
        incs: dict[str, torch.Tensor | None] = {}
        for key, (values, slice_at, inc_at) in self.tensors.items():
            out[key] = views[values]
            slices[key] = views[slice_at]
            incs[key] = views[inc_at]
        for key, values in self.texts.items():
            out[key] = values
            slices[key] = torch.arange(size + 1)
            incs[key] = None
        out.batch = views[self.batch_vector]
        out.ptr = views[self.node_ptr]
        out._store._num_nodes = list(self.num_nodes)
        out.num_nodes = int(sum(self.num_nodes))
        out._num_graphs = size
        out._slice_dict = slices
        out._inc_dict = incs
        return out


_TORCH_OF = {np.dtype(d): torch.from_numpy(np.zeros(0, d)).dtype
             for d in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64)}


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def _check_meta(path: str, meta: dict[str, Any]) -> None:
    """Refuses a ``meta.json`` that names anything but this store's own column files, or values no build writes
    (a planted ``meta.json`` must not make a column of any file on disk)."""

    def bad(what: str) -> StoreError:
        return StoreError(f"the store {path} has a meta.json that is not one of a gea-graph build ({what}); delete "
                          f"that folder to rebuild it")

    fields, derived = meta.get("fields"), meta.get("derived", [])
    if not isinstance(meta.get("num_graphs"), int) or meta["num_graphs"] < 0:
        raise bad(f"num_graphs {meta.get('num_graphs')!r}")
    if not isinstance(fields, dict) or not isinstance(derived, list) or not set(derived) <= set(DERIVED):
        raise bad("its fields")
    for key, f in fields.items():
        if not isinstance(f, dict) or not _NAME.fullmatch(str(key)) or not _NAME.fullmatch(str(f.get("level"))):
            raise bad(f"field {key!r}")
        expected = {"tensor": f"{key}.npy", "text": f"{key}.bytes"}.get(f.get("kind"))
        if f.get("file") != expected:
            raise bad(f"field {key!r} names the file {f.get('file')!r}, not {expected!r}")
        if f["kind"] == "tensor":
            shape = f.get("shape")
            if not isinstance(f.get("cat_dim"), int) or not 0 <= f["cat_dim"] <= len(shape or []) or not isinstance(
                    shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
                raise bad(f"field {key!r}: cat_dim {f.get('cat_dim')!r}, shape {shape!r}")
            _torch_dtype(str(f.get("dtype")))


#: The mappings open in this process, by file (path and identity): the splits of a dataset are stores over the same
#: files, and each mapping counts its resident pages on its own. A split's rows are spread over the whole file, so
#: three mappings (train, val, test) would hold the file up to three times in the resident set; one mapping a file
#: holds it once. An entry lives while an array of it does.
_MAPPINGS: weakref.WeakValueDictionary[tuple, np.ndarray] = weakref.WeakValueDictionary()


def _mapped(path: str, text: bool = False) -> np.ndarray:
    r"""A read-only mapping of a store file (``.npy``; :obj:`text`: raw bytes), shared with every other store of this
    process that maps the same file (see :data:`_MAPPINGS`). A plain ndarray over it: numpy's memmap subclass adds
    microseconds to every indexing."""
    # Only a regular file of the store itself: a link planted in the folder would make a column of another file.
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(f"{path} is not a regular file of the store; delete that folder to rebuild it")
    # A rebuilt store is renamed into place as new files: another inode, so another mapping.
    key = (osp.abspath(path), text, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    array = _MAPPINGS.get(key)
    if array is None:
        if text:
            array = np.asarray(np.memmap(path, dtype=np.uint8, mode="r")) if info.st_size else np.zeros(0, np.uint8)
        else:
            array = np.asarray(np.load(path, mmap_mode="r"))
        _MAPPINGS[key] = array
    return array


def release_mapped_pages() -> int:
    r"""Drops the pages of this process's store mappings from its resident set (``madvise(MADV_DONTNEED)``) and
    returns the bytes of mappings advised (0 where the platform has no such advice).

    The mappings are read-only views of the files (``MAP_SHARED``), so nothing is lost: the pages stay in the page
    cache and the next read of a row maps its page again (a minor fault, no disk read). A training run reads its
    rows spread over the whole file, so without this every page it ever touched stays counted in its resident set
    (about 270 MB of Peptides-func's store, :class:`~gea_graph.train.memory.ReleaseFreeHeap`)."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is None:
        return 0
    advised = 0
    for array in list(_MAPPINGS.values()):
        base = array.base
        while base is not None and not isinstance(base, mmap.mmap):  # ndarray -> np.memmap -> mmap.mmap
            base = getattr(base, "base", None)
        if base is not None and not base.closed:
            base.madvise(advice)
            advised += len(base)
    return advised


def _take(column: np.ndarray, ptr: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of graphs :obj:`index` of a column with offsets :obj:`ptr`, concatenated, and each graph's count.
    Blocks of many rows are copied slice by slice (a memcpy each); single rows are gathered by one indexing."""
    starts, ends = ptr[index], ptr[index + 1]
    counts = ends - starts
    if len(index) and counts.sum() > 4 * len(index):
        return np.concatenate([column[a:b] for a, b in zip(starts.tolist(), ends.tolist())]), counts
    return column[_gather_index(ptr, index)[0]], counts


def _text(column: np.ndarray, ptr: np.ndarray, index: np.ndarray) -> list[str]:
    values, counts = _take(column, ptr, index)
    blob = values.tobytes()
    ends = np.cumsum(counts).tolist()
    return [blob[a:b].decode("utf-8") for a, b in zip([0, *ends[:-1]], ends)]


class GraphStore:
    r"""Read access to a store written by :func:`build_store` (see the module docstring): one graph as a
    :class:`~torch_geometric.data.Data` (:meth:`graph`), a whole mini-batch as the
    :class:`~torch_geometric.data.Batch` that ``Batch.from_data_list`` would give, gathered column by column
    without building per-graph objects (:meth:`batch`), or one column (:meth:`column`).

    Args:
        path (str): The store folder.

    Raises:
        StoreError: when ``meta.json`` is missing or not of this format, or a column file is missing.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = osp.abspath(str(path))
        self._open()

    def _open(self) -> None:
        meta_path = osp.join(self.path, META)
        try:
            with open(meta_path) as f:
                meta = json.load(f)
        except (OSError, ValueError) as err:
            raise StoreError(f"cannot read the store {self.path}: {err}. Delete that folder to rebuild it.") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
            found = meta.get("format") if isinstance(meta, dict) else None
            raise StoreError(f"the store {self.path} has format {found!r}, this version reads "
                             f"{FORMAT_VERSION}; delete that folder to rebuild it")
        _check_meta(self.path, meta)
        self.meta = meta
        self.fields: dict[str, dict[str, Any]] = meta["fields"]
        self.derived: list[str] = list(meta.get("derived", []))
        try:
            self.num_nodes = _mapped(osp.join(self.path, "num_nodes.npy"))
            self.ptr = {f["level"]: _mapped(osp.join(self.path, f"ptr.{f['level']}.npy"))
                        for f in self.fields.values() if f["kind"] == "tensor"}
            self.columns: dict[str, np.ndarray] = {}
            for key, f in self.fields.items():
                if f["kind"] == "text":
                    self.columns[key] = _mapped(osp.join(self.path, f["file"]), text=True)
                    self.ptr[f["level"]] = _mapped(osp.join(self.path, f"ptr.{f['level']}.npy"))
                else:
                    self.columns[key] = _mapped(osp.join(self.path, f["file"]))
        except (OSError, ValueError) as err:
            raise StoreError(f"the store {self.path} is incomplete ({err}); delete that folder to rebuild it") \
                from None
        self.rows = _mapped(osp.join(self.path, "rows.npy"))
        self._check()
        self.node_ptr = np.zeros(len(self.num_nodes) + 1, dtype=np.int64)
        np.cumsum(self.num_nodes, out=self.node_ptr[1:])
        self._numpy = {k: _numpy_dtype(f) for k, f in self.fields.items() if f["kind"] == "tensor"}

    @classmethod
    def from_columns(cls, columns: Columns) -> GraphStore:
        r"""A store over one chunk of graphs held in memory (:class:`Columns`, e.g. what a dataset build's chunk
        function returns), read exactly as a built store is: :meth:`batch` gives the batches a
        :class:`~gea_graph.data.GraphLoader` gives from the store the build would write. No file is involved, and
        the store does not pickle."""
        store = cls.__new__(cls)
        store.path = None
        store.num_nodes = columns.num_nodes
        store.fields, store.ptr, store.columns, store.derived = {}, {}, {}, []
        for key, spec in columns.fields.items():
            if spec["kind"] == "derived":
                store.derived.append(key)
                continue
            store.fields[key] = {**spec, "level": key}  # one offset array per field: nothing on disk to share
            counts = columns.arrays[f"{key}.count"]
            ptr = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=ptr[1:])
            store.ptr[key] = ptr
            store.columns[key] = columns.arrays[key]
        store.meta = {"format": FORMAT_VERSION, "num_graphs": len(columns.num_nodes), "fields": store.fields,
                      "derived": store.derived}
        store.rows = np.arange(len(columns.num_nodes), dtype=np.int64)
        store.node_ptr = np.zeros(len(store.num_nodes) + 1, dtype=np.int64)
        np.cumsum(store.num_nodes, out=store.node_ptr[1:])
        store._numpy = {k: _numpy_dtype(f) for k, f in store.fields.items() if f["kind"] == "tensor"}
        return store

    def _check(self) -> None:
        """Every offset array spans every graph and ends at its column's length (a mismatch: a damaged store)."""
        graphs = int(self.meta["num_graphs"])
        problems = [f"{name} has {len(a)} entries" for name, a in (("num_nodes", self.num_nodes), ("rows", self.rows))
                    if len(a) != graphs]
        for key, f in self.fields.items():
            ptr, column = self.ptr[f["level"]], self.columns[key]
            if len(ptr) != graphs + 1 or int(ptr[-1]) != len(column):
                problems.append(f"{key} has {len(column)} rows, its offsets say {int(ptr[-1]) if len(ptr) else 0}")
            elif ptr.dtype.kind not in "iu" or int(ptr[0]) != 0 or (len(ptr) > 1 and bool((np.diff(ptr) < 0).any())):
                problems.append(f"the offsets of {key} do not rise from 0")
        if problems:
            raise StoreError(f"the store {self.path} is damaged ({'; '.join(problems)} for {graphs} graphs); delete "
                             f"that folder to rebuild it")

    # A store pickles as its path: worker processes and DDP ranks map the files themselves.
    def __getstate__(self) -> dict[str, Any]:
        if self.path is None:
            raise TypeError("a GraphStore held in memory (GraphStore.from_columns) does not pickle")
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._open()

    def __len__(self) -> int:
        return int(self.meta["num_graphs"])

    def split(self, name: str) -> np.ndarray:
        """Positions of split :obj:`name`'s graphs in the store (memory-mapped)."""
        path = osp.join(self.path, f"split.{name}.npy")
        if not _NAME.fullmatch(name.replace("-", "_")) or not osp.exists(path):
            known = sorted(f[6:-4] for f in os.listdir(self.path) if f.startswith("split."))
            raise StoreError(f"the store {self.path} has no split {name!r}; it has {known}")
        positions = _mapped(path)
        if positions.dtype.kind not in "iu" or (positions.size and (int(positions.min()) < 0
                                                                    or int(positions.max()) >= len(self))):
            raise StoreError(f"the store {self.path} is damaged (split {name!r} has positions outside its "
                             f"{len(self)} graphs); delete that folder to rebuild it")
        return positions

    def values(self, key: str, index: Sequence[int] | np.ndarray) -> torch.Tensor | list[str]:
        """Field :obj:`key` of graphs :obj:`index`, concatenated (a list of strings for a text field)."""
        if key not in self.fields:
            raise KeyError(f"the store {self.path} has no field {key!r}; it has {sorted(self.fields)}")
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        f = self.fields[key]
        ptr = self.ptr[f["level"]]
        if f["kind"] == "text":
            return _text(self.columns[key], ptr, index)
        if len(index) == len(self) and np.array_equal(index, np.arange(len(self))):
            return self._tensor(key, np.asarray(self.columns[key]))
        return self._tensor(key, _take(self.columns[key], ptr, index)[0])

    def nbytes(self) -> int:
        """Bytes of the store's files on disk."""
        return sum(osp.getsize(osp.join(self.path, name)) for name in os.listdir(self.path))

    def _tensor(self, key: str, values: np.ndarray) -> torch.Tensor:
        f = self.fields[key]
        # numpy casts: torch's .to() spreads a cast over its intra-op threads, slow when the cores are busy.
        target = self._numpy[key]
        values = values.astype(target, copy=not values.flags.writeable or values.dtype != target)
        out = torch.from_numpy(np.ascontiguousarray(values))
        return out.movedim(0, f["cat_dim"]).contiguous() if f["cat_dim"] else out

    def graph(self, idx: int) -> Data:
        """Graph :obj:`idx` as a :class:`~torch_geometric.data.Data`."""
        data = Data()
        n = int(self.num_nodes[idx])
        for key, f in self.fields.items():
            ptr = self.ptr[f["level"]]
            lo, hi = int(ptr[idx]), int(ptr[idx + 1])
            if f["kind"] == "text":
                data[key] = bytes(self.columns[key][lo:hi]).decode("utf-8")
            else:
                data[key] = self._tensor(key, self.columns[key][lo:hi])
        for key in self.derived:
            data[key] = torch.from_numpy(_all_pairs(np.array([n])))
        data.num_nodes = n
        return data

    def batch(self, index: Sequence[int] | np.ndarray) -> Batch:
        """Graphs :obj:`index` (in that order) as one :class:`~torch_geometric.data.Batch`, equal to
        ``Batch.from_data_list([self.graph(i) for i in index])`` (fields, ``batch``, ``ptr`` and the slice and
        increment records that ``get_example`` / ``to_data_list`` read), gathered column by column."""
        return self.packed_batch(index).unpack()

    def packed_batch(self, index: Sequence[int] | np.ndarray) -> PackedBatch:
        """:meth:`batch` before it becomes tensors: every array of the batch in one byte buffer (see
        :class:`PackedBatch`)."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        num_nodes = np.asarray(self.num_nodes[index], dtype=np.int64)
        node_offset = np.cumsum(num_nodes) - num_nodes
        size = len(index)
        pack = _Packer()

        def cum(counts: np.ndarray) -> int:
            ptr = np.zeros(size + 1, dtype=np.int64)
            np.cumsum(counts, out=ptr[1:])
            return pack.add(ptr)

        zeros = pack.add(np.zeros(size, dtype=np.int64))
        offsets = pack.add(node_offset)
        tensors: dict[str, tuple[int, int, int | None]] = {}  # key -> (values, slices, increments)
        texts: dict[str, list[str]] = {}
        for key, f in self.fields.items():
            if f["kind"] == "text":
                texts[key] = _text(self.columns[key], self.ptr[f["level"]], index)
                continue
            values, counts = _take(self.columns[key], self.ptr[f["level"]], index)
            if f["inc"]:
                values = values.astype(np.int64) + np.repeat(node_offset, counts).reshape(
                    (-1,) + (1,) * (values.ndim - 1))
            values = values.astype(self._numpy[key], copy=False)
            tensors[key] = (pack.add(np.moveaxis(values, 0, f["cat_dim"]) if f["cat_dim"] else values),
                            cum(counts), offsets if f["inc"] else zeros)
        for key in self.derived:
            pairs = num_nodes * num_nodes
            local = _all_pairs(num_nodes)
            local += np.repeat(node_offset, pairs)
            tensors[key] = (pack.add(local), cum(pairs), offsets)
        batch_vector = pack.add(np.repeat(np.arange(size, dtype=np.int64), num_nodes))
        node_ptr = cum(num_nodes)
        buffer, layout = pack.finish()
        return PackedBatch(buffer, layout, tensors, texts, batch_vector, node_ptr, num_nodes.tolist())

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({len(self)} graphs, fields {sorted(self.fields)}, {self.path})"
