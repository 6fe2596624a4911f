import math

import pytest
import torch

from gea_graph.nn.attention import MultiheadAttention, attention_resolver, from_dense, to_dense


def naive_mha(mod, x, mask, bias=None):
    """Dense reference from the equations, loops over graphs and heads, real nodes only."""
    B, _, C = x.shape
    H, D = mod.heads, C // mod.heads
    Wqkv, bqkv = mod.qkv.weight, mod.qkv.bias
    out = torch.zeros_like(x)
    for b in range(B):
        n = int(mask[b].sum())
        xb = x[b, :n]
        qkv = xb @ Wqkv.T + bqkv
        q, k, v = qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]
        heads = []
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            s = q[:, sl] @ k[:, sl].T / math.sqrt(D)
            if bias is not None:
                s = s + bias[b, h, :n, :n]
            heads.append(torch.softmax(s, -1) @ v[:, sl])
        out[b, :n] = torch.cat(heads, -1) @ mod.out.weight.T + mod.out.bias
    return out


def _batch(dtype=torch.float64, sizes=(3, 5, 1), C=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), C, generator=g, dtype=dtype)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return to_dense(x, batch)


@pytest.mark.parametrize("with_bias", [False, True])
def test_mha_matches_reference(with_bias):
    x, mask = _batch()
    mod = MultiheadAttention(8, 2).double()
    bias = torch.randn(x.size(0), 2, x.size(1), x.size(1), dtype=torch.float64) if with_bias else None
    out = mod(x, mask, bias)
    torch.testing.assert_close(out, naive_mha(mod, x, mask, bias))
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
