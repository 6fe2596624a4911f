r"""A dataset split resident in device memory, and mini-batches gathered there.

On a GPU, a step on small molecular graphs is bound by the host: collating a batch on the CPU and copying its ~20
tensors to the device costs more than the step's arithmetic. :class:`DeviceSplit` stores a whole split once, as
PyG's :class:`~torch_geometric.data.InMemoryDataset` does (``data`` + ``slices``): every field's values of all
graphs concatenated along its concatenation dimension, with per-graph offsets (``slices``) and increments (what
the graph adds to the index fields of the graphs after it, e.g. its node count for ``edge_index``). A mini-batch
is then a few index gathers on the device (``index_select``, ``repeat_interleave``, ``cumsum``), and only its
bookkeeping (slices, increments, node counts: a few integers per graph) is computed on the host, from host copies
of the offsets, so the gather reads nothing back from the device.

The batch is the :class:`~torch_geometric.data.Batch` the split's own loader gives for the same indices
(:class:`~gea_graph.data.GraphLoader` or PyG's :class:`~torch_geometric.loader.DataLoader`), moved to the device:
the same fields, ``batch`` and ``ptr``, ``edge_index`` offsets and slice and increment records (on the host, as
after ``Batch.to``). Its node offsets ``ptr`` are also kept on the host (:func:`host_ptr`), so that fixed-size
padding and the model's sizes need no read from the device.

:class:`DeviceLoader` yields these batches in the order of a batch sampler (the run's shuffled
:class:`~gea_graph.train.data.EpochSampler` order: the same batches as the host loader), copying each epoch's order
to the device once.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch

#: Where a device batch keeps its node offsets on the host (in the ``Batch`` object's own ``__dict__``, apart from
#: its data: ``Batch.to`` and ``clone`` keep it, and no field sees it).
HOST_PTR = "_gea_host_ptr"

#: The share of the free device memory a split may take with ``data.on_device: auto``: the rest stays for the
#: model, its activations and optimiser state, and for other runs side by side on the same device.
ON_DEVICE_SHARE = 0.25


def host_ptr(batch: Any) -> Tensor | None:
    r"""The node offsets ``ptr`` of ``batch`` on the host: ``batch.ptr`` where it is on the CPU, else the copy a
    :class:`DeviceSplit` batch (or its padded form) keeps; ``None`` when there is neither."""
    ptr = getattr(batch, "ptr", None)
    if ptr is not None and ptr.device.type == "cpu":
        return ptr
    return batch.__dict__.get(HOST_PTR)


def _exclusive_cumsum(counts: Tensor) -> Tensor:
    return counts.cumsum(0) - counts


class _Field:
    r"""One tensor field of a split: its values (all graphs, concatenation dimension ``dim``), its level (the
    index of its offsets in :attr:`DeviceSplit.levels`) and the increments of each graph ``[G, ...]``, or
    ``None`` where every increment is 0."""

    def __init__(self, values: Tensor, dim: int, level: int, increments: Tensor | None) -> None:
        self.values, self.dim, self.level, self.increments = values, dim, level, increments
        # host copy: the increments record of a batch is computed on the host
        self.host_increments = increments
        # the offset each graph's stored values carry (the increments of the graphs before it in the split)
        self.offsets = _exclusive_cumsum(increments) if increments is not None else None

    def to(self, device: torch.device) -> None:
        self.values = self.values.to(device)
        if self.increments is not None:
            self.increments, self.offsets = self.increments.to(device), self.offsets.to(device)

    def tensors(self) -> list[Tensor]:
        return [self.values] + ([self.increments, self.offsets] if self.increments is not None else [])


class DeviceSplit:
    r"""The graphs of a dataset split stored once as concatenated tensors on :obj:`device`; :meth:`batch` gathers a
    mini-batch from them with index operations on the device.

    Built from one collation of the whole split (the last graph twice, so that its increments are known too):
    ``dataset.batch(range(len))`` for a toolkit dataset, ``Batch.from_data_list`` otherwise. A dataset with a
    ``transform`` (a new result at every access, e.g. random sign flips) cannot be stored and is refused.

    Args:
        dataset: The split: a dataset with ``batch(indices)`` (every toolkit dataset), or any sequence of
            :class:`~torch_geometric.data.Data` graphs.
        device (torch.device or str, optional): Where the split lives. (default: :obj:`"cpu"`)
    """

    def __init__(self, dataset: Any, device: torch.device | str = "cpu") -> None:
        size = len(dataset)
        if size == 0:
            raise ValueError("data.on_device: the split has no graph")
        if getattr(dataset, "transform", None) is not None:
            raise ValueError(f"data.on_device: {type(dataset).__name__} has a transform (a new result at every "
                             f"access), which a split stored once cannot give; set data.on_device: false")
        index = list(range(size)) + [size - 1]
        whole = dataset.batch(index) if callable(getattr(dataset, "batch", None)) else \
            Batch.from_data_list([dataset[i] for i in index])
        self.size = size
        self.base_cls = type(whole).__bases__[-1]  # the graphs' class (PyG's dynamic "DataBatch" derives from it)
        self.has_num_nodes = "num_nodes" in whole._store
        # offsets of each level (nodes, edges, graphs, node pairs, ...): host copies for the bookkeeping
        self.host_levels: list[Tensor] = [whole.ptr[:size + 1].clone()]
        self.fields: dict[str, _Field] = {}
        self.texts: dict[str, list[Any]] = {}
        for key, slices in whole._slice_dict.items():
            value = whole[key]
            if isinstance(value, list) and whole._inc_dict.get(key) is None:
                self.texts[key] = value[:size]
                continue
            if not isinstance(value, Tensor):
                raise TypeError(f"data.on_device: field {key!r} is a {type(value).__name__}, which cannot be "
                                 f"stored on the device; set data.on_device: false")
            slices = slices[:size + 1]
            level = next((i for i, s in enumerate(self.host_levels) if torch.equal(s, slices)), None)
            if level is None:
                level = len(self.host_levels)
                self.host_levels.append(slices.clone())
            dim = whole.__cat_dim__(key, value)
            dim = 0 if dim is None else dim % value.dim()  # None: stacked along a new first dimension
            inc = whole._inc_dict.get(key)
            amounts = inc.diff(dim=0) if inc is not None else None  # what graph g adds to the graphs after it
            values = value.narrow(dim, 0, int(slices[-1])).clone()
            self.fields[key] = _Field(values, dim, level, amounts if amounts is not None and bool(amounts.any())
                                      else None)
        self.levels = self.host_levels
        self.device = torch.device("cpu")
        self.to(device)

    def to(self, device: torch.device | str) -> DeviceSplit:
        r"""Moves the stored split to :obj:`device` (in place) and returns it."""
        self.device = torch.device(device)
        self.levels = [s.to(self.device) for s in self.host_levels]
        for f in self.fields.values():
            f.to(self.device)
        return self

    @property
    def nbytes(self) -> int:
        r"""Bytes the stored split takes on its device."""
        tensors = [t for f in self.fields.values() for t in f.tensors()] + self.levels
        return sum(t.numel() * t.element_size() for t in tensors)

    def __len__(self) -> int:
        return self.size

    def batch(self, index: Sequence[int] | np.ndarray, device_index: Tensor | None = None) -> Batch:
        r"""Graphs :obj:`index` (in that order) as one :class:`~torch_geometric.data.Batch` on the split's device,
        equal to the split's own loader's batch moved there.

        Args:
            index (Sequence[int]): Positions of the graphs in the split (on the host: the bookkeeping).
            device_index (Tensor, optional): The same positions on the device (e.g. a slice of an epoch's order
                copied once); copied from :obj:`index` when not given.
        """
        host_index = torch.as_tensor(np.asarray(index, dtype=np.int64).reshape(-1))
        if host_index.numel() and (int(host_index.min()) < 0 or int(host_index.max()) >= self.size):
            raise IndexError(f"DeviceSplit.batch: indices must lie in [0, {self.size}), got {host_index.tolist()}")
        index_d = host_index.to(self.device) if device_index is None else device_index
        size = host_index.numel()
        # per level: (host slices of the batch, device rows per graph, device positions of its rows when stored)
        gathered: dict[int, tuple[Tensor, Tensor, Tensor]] = {}

        def level_rows(level: int) -> tuple[Tensor, Tensor, Tensor]:
            if level not in gathered:
                host, stored = self.host_levels[level], self.levels[level]
                counts = host[host_index + 1] - host[host_index]
                slices = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
                total = int(slices[-1])  # known on the host: no output size is read from the device
                starts, counts_d = stored[index_d], stored[index_d + 1] - stored[index_d]
                # row r of graph k of the batch is stored row starts[k] + (r - first row of k in the batch)
                rows = torch.repeat_interleave(starts - _exclusive_cumsum(counts_d), counts_d, output_size=total)
                gathered[level] = (slices, counts_d, rows + torch.arange(total, device=self.device))
            return gathered[level]

        out = Batch(_base_cls=self.base_cls)
        slice_dict: dict[str, Tensor] = {}
        inc_dict: dict[str, Tensor | None] = {}
        for key, f in self.fields.items():
            slices, counts_d, rows = level_rows(f.level)
            values = f.values.index_select(f.dim, rows)
            if f.increments is None:
                inc_dict[key] = torch.zeros(size, dtype=torch.long)
            else:
                inc_dict[key] = _exclusive_cumsum(f.host_increments[host_index])
                # each graph's stored values carry its offset in the whole split: replace it by its offset here
                shift = _exclusive_cumsum(f.increments[index_d]) - f.offsets[index_d]
                per_row = torch.repeat_interleave(shift, counts_d, dim=0, output_size=values.size(f.dim))
                shape = [1] * values.dim()
                shape[f.dim] = -1
                values = values + (per_row.view(shape) if per_row.dim() == 1 else per_row.movedim(0, f.dim))
            out[key] = values
            slice_dict[key] = slices
        for key, texts in self.texts.items():
            out[key] = [texts[i] for i in host_index.tolist()]
            slice_dict[key] = torch.arange(size + 1)
            inc_dict[key] = None
        ptr, counts_d, rows = level_rows(0)
        out.batch = torch.repeat_interleave(torch.arange(size, device=self.device), counts_d,
                                            output_size=rows.numel())
        out.ptr = torch.cat([counts_d.new_zeros(1), counts_d.cumsum(0)])
        if self.has_num_nodes:
            out._store._num_nodes = ptr.diff().tolist()
            out.num_nodes = int(ptr[-1])
        out._num_graphs = size
        out._slice_dict = slice_dict
        out._inc_dict = inc_dict
        out.__dict__[HOST_PTR] = ptr
        return out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.size} graphs, fields {sorted(self.fields) + sorted(self.texts)}, "
                f"{self.nbytes / 2**20:.1f} MiB on {self.device})")


def estimated_nbytes(dataset: Any, sample: int = 256) -> int:
    r"""The bytes a :class:`DeviceSplit` of :obj:`dataset` would take, estimated from a collation of its first
    :obj:`sample` graphs: ``auto`` never collates a whole split that is too large to keep."""
    k = min(len(dataset), sample)
    if k == 0:
        return 0
    first = dataset.batch(range(k)) if callable(getattr(dataset, "batch", None)) else \
        Batch.from_data_list([dataset[i] for i in range(k)])
    nbytes = sum(v.numel() * v.element_size() for v in first.to_dict().values() if isinstance(v, Tensor))
    return nbytes * len(dataset) // k


def fits_on_device(split_bytes: int, device: torch.device, share: float = ON_DEVICE_SHARE) -> bool:
    r"""Whether a split of :obj:`split_bytes` bytes takes under :obj:`share` of :obj:`device`'s free memory
    (``torch.cuda.mem_get_info``); never on a CPU, where the host loader is the reference."""
    if device.type != "cuda":
        return False
    free, _ = torch.cuda.mem_get_info(device)
    return split_bytes < share * free


class DeviceLoader:
    r"""Mini-batches of a :class:`DeviceSplit` in the order of :obj:`batch_sampler` (lists of positions), gathered
    on the split's device. Each epoch's order is copied to the device once; a batch is then a slice of it.

    It has the attributes Lightning and the training loop read from a loader: ``batch_sampler`` (Lightning calls
    ``set_epoch`` on its ``sampler`` before every epoch), ``dataset`` and ``graph_dataset`` (the split on the host,
    from which fixed-size shapes are planned).

    Args:
        split (DeviceSplit): The stored split.
        batch_sampler (Sampler): Lists of positions, one per batch.
        dataset: The split on the host that :obj:`split` was built from.
    """

    def __init__(self, split: DeviceSplit, batch_sampler: Any, dataset: Any) -> None:
        self.split, self.batch_sampler = split, batch_sampler
        self.dataset = self.graph_dataset = dataset

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Batch]:
        batches = [np.asarray(b, dtype=np.int64) for b in self.batch_sampler]
        order = torch.from_numpy(np.concatenate(batches)) if batches else torch.zeros(0, dtype=torch.long)
        order = order.to(self.split.device)
        start = 0
        for index in batches:
            yield self.split.batch(index, order[start:start + len(index)])
            start += len(index)
