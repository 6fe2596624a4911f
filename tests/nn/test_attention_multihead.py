
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
