
import pytest
import torch
from attention_reference import dense_batch, naive_attention

from gea_graph.nn.attention import MultiheadAttention, PLaplacianAttention
from gea_graph.nn.attention.plaplacian import default_p


def naive(mod, x, mask, bias=None, renorm=False):
    """Eq. 12 with loops: u_i = sum_j softmax_ij * (||v_i - v_j||^2 + eps)^((p-2)/2) v_j."""

    def mix(A, vh, h):
        n = vh.size(0)
        u = torch.zeros_like(vh)
        for i in range(n):
            wsum = 0.0
            for j in range(n):
                d2 = ((vh[i] - vh[j]) ** 2).sum()
                w = A[i, j] * (d2 + mod.eps) ** ((mod.p[h] - 2) / 2)
                u[i] += w * vh[j]
                wsum = wsum + w
            if renorm:
                u[i] /= wsum
        return u

    return naive_attention(mod, x, mask, bias, mix)


def test_default_p():
    assert default_p(4) == [1.5, 1.5, 2.5, 2.5]
    assert default_p(3) == [1.5, 2.0, 2.5]
    assert default_p(1) == [2.0]
    assert PLaplacianAttention(8, 2).p == [1.5, 2.5]
    with pytest.raises(ValueError):
        PLaplacianAttention(8, 2, p=[1.5])
    with pytest.raises(ValueError):
        PLaplacianAttention(8, 2, eps=0.0)


@pytest.mark.parametrize("renorm", [False, True])
def test_matches_reference(renorm):
    x, mask = dense_batch(seed=1)
    bias = torch.randn(3, 2, 5, 5, dtype=torch.float64)
    mod = PLaplacianAttention(8, 2, p=[1.5, 3.0], renormalize=renorm).double()
    torch.testing.assert_close(mod(x, mask, bias), naive(mod, x, mask, bias, renorm))


def test_p2_equals_softmax_exactly():
    x, mask = dense_batch(seed=2)
    bias = torch.randn(3, 2, 5, 5, dtype=torch.float64)
    pl = PLaplacianAttention(8, 2, p=2.0).double()
    mha = MultiheadAttention(8, 2).double()
    mha.load_state_dict(pl.state_dict())
    assert torch.equal(pl(x, mask, bias), mha(x, mask, bias))  # same fused path: bitwise
    # a p=2 head among others is softmax attention too (P == 1 exactly: pow(., 0) = 1)
    mixed = PLaplacianAttention(8, 2, p=[2.0, 1.5]).double()
    mixed.load_state_dict(pl.state_dict())
    P = mixed.distance_weights(torch.randn(2, 2, 4, 4, dtype=torch.float64))
    assert torch.equal(P[:, 0], torch.ones_like(P[:, 0]))


def test_identical_values_and_diagonal_are_finite():
    # all node features identical: every distance is 0 -> factor eps^((p-2)/2) everywhere
    x = torch.ones(2, 4, 8, dtype=torch.float64)
    mask = torch.tensor([[True] * 4, [True, False, False, False]])
    mod = PLaplacianAttention(8, 2, eps=1e-2).double()
    x.requires_grad_()
    out = mod(x, mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    v = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    P = mod.distance_weights(v)
    torch.testing.assert_close(P[0, 0], torch.full((3, 3), 1e-2 ** -0.25, dtype=torch.float64))
    torch.testing.assert_close(P[0, 1], torch.full((3, 3), 1e-2 ** 0.25, dtype=torch.float64))
    assert "eps=0.01" in repr(mod)


def test_hand_computed_distance_weights():
    """Eq. 12 on the hand example (``attention_reference.hand_weights``): A = [[3/4, 1/4], [1/4, 3/4]] and values
    e_0, e_1, so ||v_0 - v_1||^2 = 2 and the output rows are the rows of A * P."""
    from attention_reference import hand_batch, hand_weights

    x, mask = hand_batch()
    t = lambda rows: torch.tensor(rows, dtype=torch.float64)
    r2 = 2.0 ** 0.5
    # p = 3, eps = 2: P = (d^2 + 2)^(1/2) = [[sqrt 2, 2], [2, sqrt 2]]
    mod = hand_weights(PLaplacianAttention(2, 1, p=3.0, eps=2.0).double())
    out = mod(x, mask)
    torch.testing.assert_close(out[0], t([[0.75 * r2, 0.5], [0.5, 0.75 * r2]]), rtol=0, atol=1e-15)
    # a single node is its own only key: P = eps^((p-2)/2), the row is not renormalised
    torch.testing.assert_close(out[1, 0], r2 * t([1.0, 2.0]), rtol=0, atol=1e-14)
    # renormalised rows: (3 sqrt 2 / 4, 1/2) / (3 sqrt 2 / 4 + 1/2); the single node gets its value back
    ren = hand_weights(PLaplacianAttention(2, 1, p=3.0, eps=2.0, renormalize=True).double())(x, mask)
    row = t([0.75 * r2, 0.5]) / (0.75 * r2 + 0.5)
    torch.testing.assert_close(ren[0], torch.stack([row, row.flip(0)]), rtol=0, atol=1e-15)
    torch.testing.assert_close(ren[1, 0], t([1.0, 2.0]), rtol=0, atol=1e-14)
    # the paper's low p = 1.5 with the default eps = 1e-2: P_00 = 0.01^(-1/4) = sqrt 10, P_01 = 2.01^(-1/4)
    low = hand_weights(PLaplacianAttention(2, 1, p=1.5).double())(x, mask)
    p00, p01 = 10.0 ** 0.5, 2.01 ** -0.25
    torch.testing.assert_close(low[0], t([[0.75 * p00, 0.25 * p01], [0.25 * p01, 0.75 * p00]]), rtol=1e-14,
                               atol=0)


@pytest.mark.parametrize("scale, offset", [(100.0, 0.0), (1.0, 100.0)])
def test_distance_weights_stay_accurate_in_float32_for_large_values(scale, offset):
    # P_ij = (||v_i - v_j||^2 + eps)^(-1/4) from the Gram form ||v_i||^2 + ||v_j||^2 - 2 v_i.v_j cancels in float32
    # when the values are large or share a large offset (up to 47% wrong on the diagonal before): the weights,
    # the diagonal and two identical value vectors (identical atoms) agree with float64 differences.
    torch.manual_seed(0)
    mod = PLaplacianAttention(16, 1, p=1.5)
    v = offset + scale * torch.randn(1, 1, 50, 16)
    v[0, 0, 7] = v[0, 0, 3]
    P = mod.distance_weights(v).double()
    d2 = (v.double()[..., :, None, :] - v.double()[..., None, :, :]).pow(2).sum(-1)
    ref = (d2 + mod.eps) ** -0.25
    torch.testing.assert_close(P, ref, rtol=1e-5, atol=0)
    torch.testing.assert_close(P[0, 0].diagonal(), torch.full((50,), mod.eps ** -0.25, dtype=torch.float64),
                               rtol=1e-7, atol=0)  # eps^((p-2)/2) to float32 rounding
