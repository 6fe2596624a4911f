"""``to_dense`` / ``from_dense``: an unsorted batch vector is refused (PyG's ``to_dense_batch`` drops nodes silently),
an empty batch works."""

import pytest
import torch

from gea_graph.nn import GEAETLayer
from gea_graph.nn.attention import MultiheadAttention, from_dense, to_dense


def test_unsorted_batch_is_refused_not_truncated():
    x = torch.randn(5, 8)
    batch = torch.tensor([0, 1, 0, 1, 1])
    with pytest.raises(ValueError, match="batch vector is not sorted"):
        to_dense(x, batch)
    layer = GEAETLayer(8, heads=2, mpnn=None).eval()
    edge_index = torch.tensor([[0, 2], [2, 0]])
    with pytest.raises(ValueError, match="batch vector is not sorted"):
        layer(x, edge_index, torch.randn(2, 8), batch)
    # the sorted order works and keeps every node
    order = batch.argsort(stable=True)
    dense, mask = to_dense(x[order], batch[order])
    assert torch.equal(from_dense(dense, mask), x[order])


@pytest.mark.parametrize("batch_size", [None, 3])
def test_empty_batch(batch_size):
    x = torch.randn(0, 8)
    dense, mask = to_dense(x, torch.zeros(0, dtype=torch.long), batch_size=batch_size)
    assert dense.shape == (batch_size or 0, 0, 8) and mask.shape == (batch_size or 0, 0)
    out = MultiheadAttention(8, 2)(dense, mask)
    assert from_dense(out, mask).shape == (0, 8)


def test_empty_batch_through_a_geaet_layer():
    layer = GEAETLayer(8, heads=2).eval()
    out, edge_out = layer(torch.randn(0, 8), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, 8),
                          torch.zeros(0, dtype=torch.long))
    assert out.shape == (0, 8) and edge_out.shape == (0, 8)
