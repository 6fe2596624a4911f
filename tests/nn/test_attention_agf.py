import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from gea_graph.nn.attention import AGFAttention, attention_resolver, to_dense
from gea_graph.nn.attention.agf import jacobi_coefficients


def _batch(sizes=(3, 5, 1), C=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), C, generator=g, dtype=torch.float64)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return to_dense(x, batch)


def jacobi(k, a, b, x):
    """P_k^{(a,b)}(x) from the explicit sum formula (not the recurrence)."""
    total = torch.zeros_like(x)
    for s in range(k + 1):
        total = total + (_binom(k + a, k - s) * _binom(k + b, s)
                         * ((x - 1) / 2) ** s * ((x + 1) / 2) ** (k - s))
    return total


def _binom(n, k):  # generalised binomial coefficient for real n
    from math import gamma
    return gamma(n + 1) / (gamma(k + 1) * gamma(n - k + 1))


def naive(mod, x, mask, train=False):
    """Eqs. 7-11 per graph and head with the N x N matrix H = (U * g) V^T formed explicitly."""
    B, _, C = x.shape
    Hh, D = mod.heads, C // mod.heads
    W, bW = mod.proj.weight, mod.proj.bias
    theta = torch.tanh(mod.theta)
    out = torch.zeros_like(x)
    ortho = []
    for b in range(B):
        n = int(mask[b].sum())
        if n == 0:
            continue
        pr = x[b, :n] @ W.T + bW
        heads, lu, lv = [], 0.0, 0.0
        for h in range(Hh):
            sl = lambda i, h=h: slice(i * C + h * D, i * C + (h + 1) * D)
            U = torch.softmax(pr[:, sl(0)], -1)
            V = torch.softmax(pr[:, sl(1)], 0)
            val = pr[:, sl(2)]
            s = torch.sigmoid(pr[:, sl(3)])
            g = torch.ones_like(s)
            for k in range(1, mod.K + 1):
                g = g + theta[k - 1] * jacobi(k, mod.a, mod.b, s)
            Hm = (U * g) @ V.T  # [n, n]
            heads.append(Hm @ val)
            I = torch.eye(D, dtype=x.dtype)
            lu = lu + (U.T @ U - I).abs().mean() / Hh
            lv = lv + (V.T @ V - I).abs().mean() / Hh
        ortho.append(lu + lv)
        out[b, :n] = torch.cat(heads, -1) @ mod.out.weight.T + mod.out.bias
    return out, torch.stack(ortho).mean()


@pytest.mark.parametrize("K,a,b", [(0, 1.0, 1.0), (3, 1.0, 1.0), (4, 1.5, -0.5), (2, 0.0, 0.0)])
def test_matches_reference(K, a, b):
    x, mask = _batch(seed=K)
    mod = AGFAttention(8, 2, K=K, a=a, b=b, ortho_weight=0.1).double().train()
    with torch.no_grad():
        mod.theta.copy_(torch.linspace(-0.8, 0.9, K, dtype=torch.float64))
    out = mod(x, mask)
    ref, ortho = naive(mod, x, mask)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(mod.aux_loss(weighted=False), ortho)
    torch.testing.assert_close(mod.aux_loss(), 0.1 * ortho)
    assert (out[~mask] == 0).all()
    mod.eval()
    mod(x, mask)
    assert mod.aux_loss().item() == 0.0


def test_jacobi_recurrence_and_init():
    s = torch.linspace(0, 1, 7, dtype=torch.float64)
    for a, b in [(1.0, 1.0), (1.5, -0.5), (2.0, 1.5), (-0.5, -0.5)]:
        mod = AGFAttention(8, 2, K=5, a=a, b=b).double()
        for k in range(1, 6):
            with torch.no_grad():
                mod.theta.zero_()
                mod.theta[k - 1] = 10.0  # tanh -> ~1
            th = torch.tanh(torch.tensor(10.0, dtype=torch.float64))
            torch.testing.assert_close(mod.filter(s), 1 + th * jacobi(k, a, b, s))
    mod = AGFAttention(8, 2)
    assert torch.equal(mod.filter(s.float()), torch.ones(7))  # starts as efficient attention
    # implied H is row-stochastic at init
    x, mask = _batch()
    _, H = mod.float()(x.float(), mask, return_attention=True)
    torch.testing.assert_close(H.sum(-1)[mask[:, None, :].expand(-1, 2, -1)],
                               torch.ones(int(mask.sum()) * 2))
    with pytest.raises(ValueError):
        jacobi_coefficients(3, -1.0, -1.0)


def test_refuses_attn_bias():
    x, mask = _batch()
    mod = attention_resolver("agf", 8, 2)
    with pytest.raises(ValueError, match="attn_bias"):
        mod(x.float(), mask, torch.zeros(3, 2, 5, 5))


def _flops(mod, N, C=32):
    x = torch.randn(2, N, C)
    mask = torch.ones(2, N, dtype=torch.bool)
    with FlopCounterMode(display=False) as fc:
        mod(x, mask)
    return fc.get_total_flops()


def test_linear_cost_in_n():
    """FLOPs (not time) double when N doubles; softmax attention's quadruple in the N^2 part."""
    mod = AGFAttention(32, 4).eval()
    f1, f2, f4 = _flops(mod, 256), _flops(mod, 512), _flops(mod, 1024)
    assert f2 == 2 * f1 and f4 == 2 * f2
    # and no N x N intermediate: the largest tensor created is O(N)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Biggest(TorchDispatchMode):
        biggest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(t, torch.Tensor):
                    Biggest.biggest = max(Biggest.biggest, t.numel())
            return out
    N = 1024
    with Biggest():
        mod(torch.randn(1, N, 32), torch.ones(1, N, dtype=torch.bool))
    assert Biggest.biggest < N * N / 4  # an N x N map would be >= N^2 elements
    assert Biggest.biggest <= 4 * 32 * N
