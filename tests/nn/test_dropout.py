"""The CPU dropout: the distribution of torch's dropout, exact gradients, seeding, and the fused residual sum, on both
CPU paths (the native Philox kernel for float32, where a compiler works, and the bulk random bits of
scaled_keep_mask); the kernel's generator against Philox4x32-10's published known answer."""
import ctypes
import math

import numpy as np
import pytest
import torch

import gea_graph.nn.dropout as dropout_module
from gea_graph.nn import Dropout
from gea_graph.nn.dropout import dropout, dropout_add

NATIVE = dropout_module.philox_kernel() is not None


@pytest.fixture(autouse=True, params=["native", "bits"])
def path_kind(request, monkeypatch):
    """Every test of this file runs on both paths."""
    if request.param == "native" and not NATIVE:
        pytest.skip("no working C compiler: the native kernel is not built")
    monkeypatch.setenv("GEA_GRAPH_NATIVE", "1" if request.param == "native" else "0")
    return request.param


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
    # neighbours (the two int32 lanes of one 64-bit draw included) agree half of the time, no more; so do the four
    # words of one Philox block (elements 16 apart in a chunk of 64) and the same element of two calls
    agree = (keep[1:] == keep[:-1]).float().mean().item()
    lanes = (keep[0::2] == keep[1::2]).float().mean().item()
    chunks = keep.view(-1, 4, 16)
    words = (chunks[:, 1:] == chunks[:, :-1]).float().mean().item()
    calls = (keep == (dropout(torch.ones(200_000), 0.5) != 0)).float().mean().item()
    for rate in (agree, lanes, words, calls):
        assert abs(rate - 0.5) < 0.01


def test_native_generator_is_philox4x32_10(path_kind):
    # Random123's known answer: Philox4x32-10 of counter (0, 0, 0, 0) under key (0, 0) is 6627e8d5 e169c58d
    # bc57ac4c 9b00dbd8. The kernel keeps an element when its word is >= the threshold, so a binary search over
    # thresholds reads the words of block 0: elements 0, 16, 32 and 48 of the first chunk.
    if path_kind != "native":
        pytest.skip("the native kernel's generator")
    kernel = dropout_module.philox_kernel()
    ones, out = np.ones(64, np.float32), np.empty(64, np.float32)
    words = np.zeros(64, np.uint64)
    for bit in range(31, -1, -1):
        for e in (0, 16, 32, 48):
            kernel.dropout_forward(64, ones.ctypes.data, None, out.ctypes.data, 0, 0, int(words[e]) | 1 << bit,
                                   ctypes.c_float(1.0))
            if out[e] == 1.0:
                words[e] |= 1 << bit
    assert [int(words[e]) for e in (0, 16, 32, 48)] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(64, 33), (3, 1000, 7)])  # sizes that are no multiple of a kernel chunk
def test_gradient_is_the_mask(dtype, shape):
    torch.manual_seed(2)
    x = (torch.rand(*shape, dtype=dtype) + 0.5).requires_grad_()
    out = dropout(x, 0.3)
    g = torch.randn_like(out)
    out.backward(g)
    mask = out.detach() / x.detach()  # 0 or 1 / (1 - p)
    torch.testing.assert_close(x.grad, g * mask)
    kept = (mask.double() - 1 / 0.7).abs() < 1e-5  # mask from out / x: up to a rounding of 1 / (1 - p)
    assert bool(((mask == 0) | kept).all()) and 0 < int(kept.sum()) < mask.numel()


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


def test_strided_input_gets_the_gradient_of_its_mask():
    torch.manual_seed(6)
    leaf = (torch.rand(40, 30) + 0.5).requires_grad_()
    out = dropout(leaf.t(), 0.5)  # non-contiguous: the backward draws the mask of the same element order again
    g = torch.randn_like(out)
    out.backward(g)
    torch.testing.assert_close(leaf.grad.t(), g * (out.detach() != 0) / 0.5)
