
import math

import pytest
import torch
from attention_reference import dense_batch, naive_attention

from gea_graph.nn.attention import MultiheadAttention, attention_resolver, from_dense, to_dense


@pytest.mark.parametrize("with_bias", [False, True])
def test_mha_matches_reference(with_bias):
    x, mask = dense_batch()
    mod = MultiheadAttention(8, 2).double()
    bias = torch.randn(x.size(0), 2, x.size(1), x.size(1), dtype=torch.float64) if with_bias else None
    out = mod(x, mask, bias)
    torch.testing.assert_close(out, naive_attention(mod, x, mask, bias))
    assert (out[~mask] == 0).all()
    out2, attn = mod(x, mask, bias, return_attention=True)
    torch.testing.assert_close(out, out2)
    assert attn.shape == (3, 2, 5, 5)
    torch.testing.assert_close(attn.sum(-1)[mask[:, None, :].expand(-1, 2, -1)],
                               torch.ones(int(mask.sum()) * 2, dtype=torch.float64))
    mod.store_attention = True
    mod(x, mask, bias)
    torch.testing.assert_close(mod.attention, attn)


def test_resolver_and_helpers():
    mod = attention_resolver("softmax", 8, 2, dropout=0.1)
    assert isinstance(mod, MultiheadAttention) and mod.dropout == 0.1
    x = torch.randn(6, 8)
    batch = torch.tensor([0, 0, 1, 1, 1, 2])
    xd, mask = to_dense(x, batch)
    assert torch.equal(from_dense(xd, mask), x)
    with pytest.raises(ValueError):
        attention_resolver("nope", 8, 2)
    assert "MultiheadAttention(8, heads=2" in repr(mod)


def test_hand_computed_scores_bias_and_single_node():
    """Eq. 1 of Vaswani et al. (and Graphormer's Eq. 6 bias) on the hand example of ``hand_weights``."""
    from attention_reference import HAND_A, hand_batch, hand_weights

    mod = hand_weights(MultiheadAttention(2, 1).double())
    x, mask = hand_batch()
    out = mod(x, mask)
    # the values are e_0, e_1, so each output row is the softmax row; a single node attends to itself: out = v
    torch.testing.assert_close(out[0], torch.tensor(HAND_A, dtype=torch.float64), rtol=0, atol=1e-15)
    torch.testing.assert_close(out[1, 0], torch.tensor([1.0, 2.0], dtype=torch.float64), rtol=0, atol=1e-15)
    assert (out[1, 1] == 0).all()
    # a bias ln 3 on (0, 1) evens node 0's scores: its row becomes (1/2, 1/2); node 1's row is unchanged
    bias = torch.zeros(2, 1, 2, 2, dtype=torch.float64)
    bias[0, 0, 0, 1] = math.log(3.0)
    out = mod(x, mask, bias)
    torch.testing.assert_close(out[0], torch.tensor([[0.5, 0.5], HAND_A[1]], dtype=torch.float64), rtol=0,
                               atol=1e-15)
