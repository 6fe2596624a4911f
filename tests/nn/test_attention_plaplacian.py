
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
