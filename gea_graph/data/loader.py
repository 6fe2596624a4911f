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

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    Sampler,
    SequentialSampler,
    get_worker_info,
)
from torch_geometric.data import Batch

from gea_graph.data.store import PackedBatch


class _Batches:
    """Map-style view whose ``__getitems__`` (what a ``DataLoader`` calls with a batch's indices) returns the
    dataset's gathered batch; in a worker process the packed form (:class:`~gea_graph.data.store.PackedBatch`),
    which travels to the main process as one byte string."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Batch | PackedBatch:
        return self.__getitems__([index])

    def __getitems__(self, indices: Sequence[int]) -> Batch | PackedBatch:
        packed = getattr(self.dataset, "packed_batch", None)
        if packed is not None and get_worker_info() is not None:
            result = packed(indices)
            if result is not None:
                return result
        return self.dataset.batch(indices)


def _unwrap(batch: Batch | PackedBatch) -> Batch | PackedBatch:
    return batch


class EpochBatchSampler(BatchSampler):
    """A :class:`~torch.utils.data.BatchSampler` that passes ``set_epoch`` on to its sampler (Lightning calls it on a
    loader's batch sampler before every epoch)."""

    def set_epoch(self, epoch: int) -> None:
        if callable(getattr(self.sampler, "set_epoch", None)):
            self.sampler.set_epoch(epoch)


class GraphLoader(DataLoader):
    r"""Mini-batches of a dataset with a ``batch(indices)`` method (every built-in dataset of the toolkit), gathered
    whole from its store instead of graph by graph; yields the :class:`~torch_geometric.data.Batch` that PyG's
    :class:`~torch_geometric.loader.DataLoader` would give for the same indices.

    Args:
        dataset: A dataset with ``batch(indices) -> Batch`` and ``__len__``.
        batch_size (int, optional): Graphs per batch. (default: :obj:`1`)
        shuffle (bool, optional): Random order each epoch (ignored when :obj:`sampler` is given).
            (default: :obj:`False`)
        sampler (Sampler, optional): Order of the graphs; its ``set_epoch`` is called each epoch if it has one.
        drop_last (bool, optional): Drop a last, smaller batch. (default: :obj:`False`)
        **kwargs: Other :class:`~torch.utils.data.DataLoader` arguments (``num_workers``, ``pin_memory``,
            ``persistent_workers``, ...). Workers share the store's memory-mapped files.
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False, sampler: Sampler | None = None,
                 drop_last: bool = False, **kwargs: Any) -> None:
        if not callable(getattr(dataset, "batch", None)):
            raise TypeError(f"GraphLoader needs a dataset with a batch(indices) method (a gea_graph dataset), got "
                            f"{type(dataset).__name__}; use torch_geometric.loader.DataLoader for other datasets")
        for key in ("batch_sampler", "collate_fn"):
            if key in kwargs:
                raise TypeError(f"GraphLoader sets {key} itself; pass sampler= and batch_size= instead")
        if sampler is None:
            sampler = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        self.graph_dataset = dataset
        super().__init__(_Batches(dataset), batch_sampler=EpochBatchSampler(sampler, batch_size, drop_last),
                         collate_fn=_unwrap, **kwargs)

    def __iter__(self) -> Iterator[Batch]:
        for batch in super().__iter__():
            if isinstance(batch, PackedBatch):
                batch = batch.unpack()
                if self.pin_memory:
                    batch = batch.pin_memory()
            yield batch
