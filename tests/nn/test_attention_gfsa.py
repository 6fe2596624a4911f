
import pytest
import torch
from attention_reference import dense_batch, naive_attention

from gea_graph.nn.attention import GFSA, MultiheadAttention, attention_resolver


def naive(mod, x, mask, bias=None, filt=None):
    """Per graph and head: out = filt(Abar) V W_O, with Abar from the equations."""
    mix = None if filt is None else (lambda A, v, h: filt(A, h) @ v)
    return naive_attention(mod, x, mask, bias, mix)


def gfsa_filter(mod, explicit_power=False):
    K = mod.K

    def f(A, h):
        w0, w1, wK = mod.w0[h], mod.w1[h], mod.wK[h]
        I = torch.eye(A.size(0), dtype=A.dtype)
        A2 = A @ A  # explicit square: the paper's Eq. 5
        return w0 * I + w1 * A + wK * (A + (K - 1) * (A2 - A))
    return f


def test_init_equals_softmax():
    x, mask = dense_batch()
    bias = torch.randn(3, 2, 5, 5, dtype=torch.float64)
    gf = GFSA(8, 2).double()
    mha = MultiheadAttention(8, 2).double()
    mha.load_state_dict(gf.state_dict(), strict=False)
    torch.testing.assert_close(gf(x, mask, bias), mha(x, mask, bias))
    c = gf.coefficients()
    assert c.w0.tolist() == [0, 0] and c.w1.tolist() == [1, 1] and c.wK.tolist() == [0, 0]
    assert c.K == 2


@pytest.mark.parametrize("K", [2, 3, 5, 2.5])
@pytest.mark.parametrize("learn", [("w0", "w1", "wK"), ("wK",)])
def test_matches_explicit_square(K, learn):
    x, mask = dense_batch(seed=1)
    bias = torch.randn(3, 2, 5, 5, dtype=torch.float64)
    mod = GFSA(8, 2, K=K, learn=learn).double()
    with torch.no_grad():
        mod.wK.copy_(torch.tensor([0.7, -0.4]))
        if "w0" in learn:
            mod.w0.copy_(torch.tensor([0.3, -0.2]))
            mod.w1.copy_(torch.tensor([0.9, 1.3]))
    torch.testing.assert_close(mod(x, mask, bias), naive(mod, x, mask, bias, gfsa_filter(mod)))


def test_official_form():
    """learn=("wK",): out = (A + wK (A + (K-1)(A^2 - A))) V, the authors' Graphormer code."""
    x, mask = dense_batch(seed=2)
    mod = GFSA(8, 2, K=3, learn="wK").double()
    assert [n for n, _ in mod.named_parameters() if n.startswith("w")] == ["wK"]
    with torch.no_grad():
        mod.wK.copy_(torch.tensor([0.5, -1.0]))

    def official(A, h):
        return A + mod.wK[h] * (A + 2 * (A @ A - A))
    torch.testing.assert_close(mod(x, mask), naive(mod, x, mask, None, official))
    # fixed w0 (BERT code's --w_0)
    mod2 = GFSA(8, 2, K=3, learn="wK", w0_init=-0.01).double()
    mod2.qkv.load_state_dict(mod.qkv.state_dict())
    mod2.out.load_state_dict(mod.out.state_dict())
    with torch.no_grad():
        mod2.wK.copy_(mod.wK)
    torch.testing.assert_close(mod2.w0, torch.full((2,), -0.01, dtype=torch.float64))
    eye = lambda A: torch.eye(A.size(0), dtype=A.dtype)
    torch.testing.assert_close(
        mod2(x, mask), naive(mod2, x, mask, None, lambda A, h: official(A, h) - 0.01 * eye(A)))


def test_filter_response_and_polynomial():
    mod = GFSA(8, 2, K=3)
    with torch.no_grad():
        mod.wK.copy_(torch.tensor([0.5, -1.0]))
    lam = torch.linspace(-1, 1, 5)
    r = mod.filter_response(lam)
    assert r.shape == (2, 5)
    expected = 0 + 1 * lam + 0.5 * (lam + 2 * (lam ** 2 - lam))
    torch.testing.assert_close(r[0], expected)
    lam_c = torch.tensor([0.5 + 0.5j])
    assert mod.filter_response(lam_c).dtype == torch.complex64
    assert "K=3" in repr(mod)
    with pytest.raises(ValueError):
        GFSA(8, 2, learn=("w3",))
    assert isinstance(attention_resolver("gfsa", 8, 2, K=4), GFSA)


def test_dropout_shares_mask_in_both_products():
    torch.manual_seed(0)
    x, mask = dense_batch(seed=3)
    mod = GFSA(8, 2, dropout=0.5).double().train()
    with torch.no_grad():
        mod.wK.fill_(0.8)
    torch.manual_seed(1)
    out = mod(x, mask)
    assert torch.isfinite(out).all() and (out[~mask] == 0).all()


def test_hand_computed_filter():
    """Eq. 5 on the hand example (``attention_reference.hand_weights``): A = [[3/4, 1/4], [1/4, 3/4]], so
    A^2 = [[5/8, 3/8], [3/8, 5/8]]; the values are e_0, e_1, so each output row is a row of H."""
    from attention_reference import hand_batch, hand_weights

    x, mask = hand_batch()
    t = lambda rows: torch.tensor(rows, dtype=torch.float64)
    # K = 3, (w0, w1, wK) = (1/2, 1, -1): A + 2(A^2 - A) = 2A^2 - A = [[1/2, 1/2], [1/2, 1/2]], so
    # H = I/2 + A - [[1/2, 1/2], [1/2, 1/2]] = [[3/4, -1/4], [-1/4, 3/4]] (not renormalised: rows sum to 1/2)
    mod = hand_weights(GFSA(2, 1, K=3).double())
    with torch.no_grad():
        mod.w0.fill_(0.5)
        mod.wK.fill_(-1.0)
    out = mod(x, mask)
    torch.testing.assert_close(out[0], t([[0.75, -0.25], [-0.25, 0.75]]), rtol=0, atol=1e-15)
    # a single node: A = [[1]], so A^K = 1 and H = w0 + w1 + wK = 1/2
    torch.testing.assert_close(out[1, 0], t([0.5, 1.0]), rtol=0, atol=1e-15)
    # the authors' Graphormer form, K = 2, only wK = 1/2: H = A + A^2 / 2 = [[17/16, 7/16], [7/16, 17/16]]
    official = hand_weights(GFSA(2, 1, K=2, learn="wK").double())
    with torch.no_grad():
        official.wK.fill_(0.5)
    out = official(x, mask)
    torch.testing.assert_close(out[0], t([[17 / 16, 7 / 16], [7 / 16, 17 / 16]]), rtol=0, atol=1e-15)
    torch.testing.assert_close(out[1, 0], t([1.5, 3.0]), rtol=0, atol=1e-15)
