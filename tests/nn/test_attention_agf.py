import math

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


def test_hand_computed_filter_and_ortho_loss():
    """Eqs. 7-11 worked by hand: one head, d = 2, K = 1, a = b = 1 (P_1(s) = 2s), no biases, W_U = W_Sigma = 0
    (U = (1/2, 1/2), s = 1/2, P_1(s) = 1), W_val = W_O = I, W_V = [[ln 3, 0], [0, 0]] and
    tanh(theta_1) = 1/2, so g = 3/2 everywhere. Nodes e_0, e_1: the node softmax of V gives V = [[3/4, 1/2],
    [1/4, 1/2]], V^T X W_val = [[3/4, 1/4], [1/2, 1/2]], and every output row is
    (3/2)((1/2)(3/4, 1/4) + (1/2)(1/2, 1/2)) = (15/16, 9/16)."""
    from attention_reference import hand_batch

    t = lambda rows: torch.tensor(rows, dtype=torch.float64)
    mod = AGFAttention(2, 1, K=1, a=1.0, b=1.0, bias=False).double().train()
    with torch.no_grad():
        w = torch.zeros(8, 2, dtype=torch.float64)
        w[2, 0] = math.log(3.0)  # W_V
        w[4:6] = torch.eye(2)  # W_val
        mod.proj.weight.copy_(w)
        mod.out.weight.copy_(torch.eye(2))
        mod.theta.fill_(math.atanh(0.5))
    x, mask = hand_batch()
    out, implied = mod(x, mask, return_attention=True)
    torch.testing.assert_close(out[0], t([[15 / 16, 9 / 16], [15 / 16, 9 / 16]]), rtol=0, atol=1e-15)
    # a single node: V = (1, 1), so every row of V^T X W_val is its value, and out = (sum_k U_k g) v = (3/2) v
    torch.testing.assert_close(out[1, 0], t([1.5, 3.0]), rtol=0, atol=1e-15)
    # the implied H = (U * g) V^T: rows (15/16, 9/16) sum to g, not to 1 (agf-notes §1.7)
    torch.testing.assert_close(implied[0, 0], t([[15 / 16, 9 / 16], [15 / 16, 9 / 16]]), rtol=0, atol=1e-15)
    # Eq. 11 as the authors' code (entrywise mean of |Gram - I|), averaged over the graphs. Two-node graph:
    # U^T U = [[1/2, 1/2], [1/2, 1/2]] gives 1/2, V^T V = [[5/8, 1/2], [1/2, 1/2]] gives (3/8 + 3 * 1/2) / 4.
    # Single node: U^T U = [[1/4, 1/4], [1/4, 1/4]] gives (3/4 + 3/4 + 1/4 + 1/4) / 4, V^T V = ones gives 1/2.
    two = 0.5 + (0.375 + 1.5) / 4
    one = (0.75 + 0.75 + 0.25 + 0.25) / 4 + (0 + 0 + 1 + 1) / 4
    torch.testing.assert_close(mod.aux_loss(weighted=False), t((two + one) / 2), rtol=0, atol=1e-15)
