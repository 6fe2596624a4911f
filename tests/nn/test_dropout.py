"""The CPU dropout: the distribution of torch's dropout, exact gradients, seeding, and the fused residual sum."""
import math

import pytest
import torch

from gea_graph.nn import Dropout
from gea_graph.nn.dropout import dropout, dropout_add


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drops_each_element_with_probability_p(p):
    torch.manual_seed(0)
    n = 400_000
    out = dropout(torch.ones(n), p)
    dropped = int((out == 0).sum())
    # the binomial count lies within 6 standard deviations of n p
    assert abs(dropped - n * p) < 6 * math.sqrt(n * p * (1 - p))
    kept = out[out != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1.0 / (1.0 - p)))  # survivors scaled by 1/(1-p)


def test_elements_are_dropped_independently():
    torch.manual_seed(1)
    keep = dropout(torch.ones(200_000), 0.5) != 0
    # neighbours (the two int32 lanes of one 64-bit draw included) agree half of the time, no more
    agree = (keep[1:] == keep[:-1]).float().mean().item()
    lanes = (keep[0::2] == keep[1::2]).float().mean().item()
    assert abs(agree - 0.5) < 0.01 and abs(lanes - 0.5) < 0.01


def test_gradient_is_the_mask():
    torch.manual_seed(2)
    x = torch.randn(64, 33, dtype=torch.float64, requires_grad=True)
    out = dropout(x, 0.3)
    g = torch.randn_like(out)
    out.backward(g)
    mask = out.detach() / x.detach()  # 0 or 1 / (1 - p)
    torch.testing.assert_close(x.grad, g * mask)
    assert set(torch.unique(mask.round(decimals=6)).tolist()) <= {0.0, round(1 / 0.7, 6)}


def test_seeded_runs_repeat():
    x = torch.randn(1000)
    torch.manual_seed(3)
    a = dropout(x, 0.2)
    torch.manual_seed(3)
    b = dropout(x, 0.2)
    assert torch.equal(a, b)
    assert not torch.equal(a, dropout(x, 0.2))  # the generator moved on


def test_identity_in_evaluation_and_at_zero():
    x = torch.randn(5, 3)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))  # torch's dropout, as for p = 1
    torch.testing.assert_close(dropout_add(x, x, 0.5, training=False), 2 * x)


def test_other_dtypes_fall_back_and_strided_inputs_keep_their_layout():
    torch.manual_seed(4)
    x = torch.randn(2000, dtype=torch.bfloat16)
    out = dropout(x, 0.5)
    assert out.dtype == torch.bfloat16 and 0 < int((out == 0).sum()) < 2000
    t = torch.randn(40, 30).t()  # non-contiguous: the output keeps the values in place
    out = dropout(t, 0.5)
    assert out.shape == t.shape and torch.equal(out != 0, out * (1 - 0.5) == t)


def test_dropout_add_is_residual_plus_dropout():
    x = torch.randn(300, 20, requires_grad=True)
    r = torch.randn(300, 20, requires_grad=True)
    torch.manual_seed(5)
    fused = dropout_add(x, r, 0.25)
    g = torch.randn_like(fused)
    gx, gr = torch.autograd.grad(fused, (x, r), g)
    torch.manual_seed(5)
    plain = r + dropout(x, 0.25)
    gx_ref, gr_ref = torch.autograd.grad(plain, (x, r), g)
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close(gx, gx_ref)
    torch.testing.assert_close(gr, gr_ref)
    with pytest.raises(ValueError, match="shape"):
        dropout_add(x, r[:10], 0.25)


def test_module():
    m = Dropout(0.4)
    assert repr(m) == "Dropout(p=0.4)"
    x = torch.randn(100)
    assert m.eval()(x) is x
    assert int((m.train()(x) == 0).sum()) > 0
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(1.5)
