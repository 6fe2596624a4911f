"""A loader that pins memory pins each batch as one buffer (not one block per tensor): the packed batch of the
store is what is pinned, and every tensor of the batch is a view of it. (Real pinning needs an accelerator: here
``Tensor.pin_memory`` is replaced by a counting copy; ``gea-graph selfcheck`` checks the real thing on a GPU.)"""
from __future__ import annotations

import pytest
import torch
from test_store import assert_same_batch, build, graphs
from torch.utils.data._utils.pin_memory import pin_memory as dataloader_pin_memory

from gea_graph.data import GraphLoader
from gea_graph.data.store import PackedBatch


class View:
    """A store as a dataset (what GraphLoader needs)."""

    def __init__(self, store):
        self.store = store

    def __len__(self):
        return len(self.store)

    def batch(self, index):
        return self.store.batch(index)

    def packed_batch(self, index):
        return self.store.packed_batch(index)


def test_a_pinned_batch_is_one_pinned_buffer(tmp_path, monkeypatch):
    store = build(tmp_path / "s", graphs(20))
    packed = store.packed_batch([3, 1, 7, 12])
    calls = []

    def fake_pin(self):
        calls.append(self.numel())
        return self.clone()

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    pinned = dataloader_pin_memory(packed)  # what a DataLoader with pin_memory=True does to each batch
    assert isinstance(pinned, PackedBatch) and calls == [packed.buffer.numel()]  # one copy, one block
    batch = pinned.unpack()
    tensors = [v for v in batch.to_dict().values() if isinstance(v, torch.Tensor)]
    assert len(tensors) > 10
    assert {t.untyped_storage().data_ptr() for t in tensors} == {pinned.buffer.untyped_storage().data_ptr()}
    assert_same_batch(batch, store.batch([3, 1, 7, 12]))


# The test asks for pinning on a machine that may have no accelerator (the library asks only on CUDA): torch then
# warns that nothing is pinned, which is what this machine is.
@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator is found:UserWarning")
def test_a_pinning_loader_gathers_packed_batches_in_the_main_process_too(tmp_path):
    store = build(tmp_path / "s", graphs(20))
    loader = GraphLoader(View(store), batch_size=6, pin_memory=True)
    assert isinstance(loader.dataset.__getitems__([0, 1]), PackedBatch)  # packed: ready to be pinned as one block
    assert not GraphLoader(View(store), batch_size=6).dataset.packed
    for got, index in zip(loader, ([0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17], [18, 19])):
        assert_same_batch(got, store.batch(index))
