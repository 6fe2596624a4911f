r"""A data loader that gathers each mini-batch column by column from a dataset's store.

PyG's :class:`~torch_geometric.loader.DataLoader` fetches graph by graph (``dataset[i]``, one
:class:`~torch_geometric.data.Data` each) and collates them (``Batch.from_data_list``): Python work per graph and per
field. :class:`GraphLoader` asks the dataset for the whole batch at once (``dataset.batch(indices)``, see
:meth:`gea_graph.data.CachedDataset.batch`), which is one numpy gather per column of the memory-mapped store. The
batches are the same ``Batch`` objects, field for field.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader, Sampler, get_worker_info
from torch_geometric.data import Batch

from gea_graph.data.store import PackedBatch


class _Batches:
    """Map-style view whose ``__getitems__`` (what a ``DataLoader`` calls with a batch's indices) returns the
    dataset's gathered batch; in a worker process, or when ``packed`` (a loader that pins memory), the packed form
    (:class:`~gea_graph.data.store.PackedBatch`): one byte buffer that travels to the main process, and is pinned,
    as one block."""

    def __init__(self, dataset: Any, packed: bool = False) -> None:
        self.dataset = dataset
        self.packed = packed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Batch | PackedBatch:
        return self.__getitems__([index])

    def __getitems__(self, indices: Sequence[int]) -> Batch | PackedBatch:
        packed = getattr(self.dataset, "packed_batch", None)
        if packed is not None and (self.packed or get_worker_info() is not None):
            result = packed(indices)
            if result is not None:
                return result
        return self.dataset.batch(indices)


def _unwrap(batch: Batch | PackedBatch) -> Batch | PackedBatch:
    return batch


class GraphLoader(DataLoader):
    r"""Mini-batches of a dataset with a ``batch(indices)`` method (every built-in dataset of the toolkit), gathered
    whole from its store instead of graph by graph; yields the :class:`~torch_geometric.data.Batch` that PyG's
    :class:`~torch_geometric.loader.DataLoader` would give for the same indices.

    The arguments are :class:`~torch.utils.data.DataLoader`'s (all but ``collate_fn``), so Lightning can re-create
    the loader with a :class:`~torch.utils.data.distributed.DistributedSampler` (``shuffle=True`` is then read as a
    shuffled loader, reshuffled every epoch). With ``pin_memory`` each batch is gathered into one buffer and pinned
    as one block (:class:`~gea_graph.data.store.PackedBatch`); its tensors are views of it.

    Args:
        dataset: A dataset with ``batch(indices) -> Batch`` and ``__len__``.
        batch_size (int, optional): Graphs per batch. (default: :obj:`1`)
        shuffle (bool, optional): Random order each epoch (not with :obj:`sampler`). (default: :obj:`False`)
        sampler (Sampler, optional): Order of the graphs (Lightning calls its ``set_epoch`` before each epoch, also
            on a ``batch_sampler``'s ``sampler``).
        **kwargs: Other :class:`~torch.utils.data.DataLoader` arguments (``batch_sampler``, ``drop_last``,
            ``num_workers``, ``pin_memory``, ``persistent_workers``, ...). Workers share the store's memory-mapped
            files.
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Sampler | None = None, **kwargs: Any) -> None:
        if isinstance(dataset, _Batches):  # Lightning re-creating this loader from its attributes (DDP's sampler)
            dataset = dataset.dataset
        if not callable(getattr(dataset, "batch", None)):
            raise TypeError(f"GraphLoader needs a dataset with a batch(indices) method (a gea_graph dataset), got "
                            f"{type(dataset).__name__}; use torch_geometric.loader.DataLoader for other datasets")
        if kwargs.pop("collate_fn", _unwrap) is not _unwrap:
            raise TypeError("GraphLoader sets collate_fn itself (the dataset gathers whole batches)")
        self.graph_dataset = dataset
        super().__init__(_Batches(dataset, packed=bool(kwargs.get("pin_memory"))), batch_size=batch_size,
                         shuffle=shuffle, sampler=sampler, collate_fn=_unwrap, **kwargs)

    def __iter__(self) -> Iterator[Batch]:
        for batch in super().__iter__():
            # a packed batch (from a worker, or pinned as one buffer) becomes views of its buffer
            yield batch.unpack() if isinstance(batch, PackedBatch) else batch
