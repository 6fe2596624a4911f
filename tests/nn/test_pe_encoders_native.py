"""The native CPU kernel of the LapPE DeepSet (gea_graph/native/kernels/lap_deepset.c) against the PyTorch path in
float64 (itself tested against the GraphGPS equations in test_pe_encoders.py): outputs and every weight gradient,
with NaN padding, masks, empty rows and widths that are not powers of two; where the kernel is not used."""
import pytest
import torch

import gea_graph.nn.pe_encoders as pe
from gea_graph.nn import LapPEEncoder

pytestmark = pytest.mark.skipif(pe.deepset_kernel(4, 2) is None,
                                reason="no working C compiler: the native kernel is not built")


def _pairs(n, k, seed=0):
    """Eigenvectors and eigenvalues [n, k] with GraphGPS's NaN padding on every third node's last pairs, and a
    mask that drops one pair in ten more."""
    g = torch.Generator().manual_seed(seed)
    vec, val = torch.randn(n, k, generator=g), torch.rand(n, k, generator=g) * 2
    vec[::3, k // 2:] = float("nan")
    val[::3, k // 2:] = float("nan")
    return vec, val, torch.rand(n, k, generator=g) > 0.1


def _run(enc, vec, val, mask, weight, batch=None):
    """Output and parameter gradients of one forward + backward, in float64 (inputs in enc's dtype)."""
    dtype = next(enc.parameters()).dtype
    enc.zero_grad(set_to_none=True)
    torch.manual_seed(3)  # the same sign flips on both paths
    out = enc(None, (vec.to(dtype), val.to(dtype), mask), batch=batch)
    (out * weight.to(dtype)).sum().backward()
    return [out.detach().double()] + [p.grad.double() for p in enc.parameters()]


def _pair_of_encoders(dim_pe, **kw):
    torch.manual_seed(0)
    e32 = LapPEEncoder(dim_pe, **kw)
    e64 = LapPEEncoder(dim_pe, **kw).double()
    e64.load_state_dict(e32.state_dict())
    return e32, e64


@pytest.mark.parametrize("dim_pe,k,n", [(16, 10, 300),  # the recipes' LapPE-10 to 16 channels
                                        (3, 1, 40),  # widths 6 and 3: padded lanes; one pair per node
                                        (40, 4, 17),  # hidden width 80: 128 lanes
                                        (8, 5, 1),  # one node
                                        (8, 5, 0)])  # no node
@pytest.mark.parametrize("training", [True, False])
def test_native_deepset_matches_the_pytorch_path(dim_pe, k, n, training):
    e32, e64 = _pair_of_encoders(dim_pe)
    e32.train(training)
    e64.train(training)
    vec, val, mask = _pairs(n, k)
    batch = torch.arange(n) // 7
    assert e32._native_deepset(torch.zeros(1, k, 2)) is not None
    weight = torch.randn(n, dim_pe, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = _run(e32, vec, val, mask, weight, batch)
    want = _run(e64, vec, val, mask, weight, batch)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
        assert torch.allclose(g, w, rtol=1e-5, atol=1e-5 * scale), (g - w).abs().max()


def test_native_deepset_rows_without_a_pair_are_zero():
    e32, _ = _pair_of_encoders(8)
    vec, val, mask = _pairs(6, 4)
    mask[2] = False  # a node all of whose pairs are masked
    vec[4] = float("nan")  # and one all of whose pairs are padding
    out = e32.eval()(None, (vec, val, mask))
    assert torch.equal(out[2], torch.zeros(8)) and torch.equal(out[4], torch.zeros(8))


def test_native_deepset_weight_gradients_are_summed_accurately():
    # 50,000 nodes x 10 pairs: a running float32 sum over 500k pairs would be ~1e-4 off; blocks of 32 nodes summed
    # in float64 keep the gradients within a few float32 roundings of float64
    e32, e64 = _pair_of_encoders(16)
    vec, val, mask = _pairs(50_000, 10, seed=4)
    weight = torch.rand(50_000, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    got = _run(e32.eval(), vec, val, mask, weight)
    want = _run(e64.eval(), vec, val, mask, weight)
    for g, w in zip(got[1:], want[1:]):
        assert float((g - w).abs().max() / w.abs().max()) < 2e-6


@pytest.mark.parametrize("kw,dtype,needs_grad", [
    ({"num_layers": 3}, torch.float32, False),  # only the two-layer DeepSet is fused
    ({"num_layers": 1}, torch.float32, False),
    ({"act": "gelu"}, torch.float32, False),
    ({"model": "linear", "k": 4}, torch.float32, False),
    ({}, torch.float64, False),
    ({}, torch.float32, True),  # raw_norm: the raw pairs need a gradient, which the kernel does not give
])
def test_native_deepset_is_used_only_where_it_applies(kw, dtype, needs_grad):
    enc = LapPEEncoder(8, **kw).to(dtype)
    raw = torch.zeros(3, 4, 2, dtype=dtype, requires_grad=needs_grad)
    assert enc._native_deepset(raw) is None


def test_native_deepset_off_runs_the_pytorch_path(monkeypatch):
    monkeypatch.setenv("GEA_GRAPH_NATIVE", "0")
    assert LapPEEncoder(8)._native_deepset(torch.zeros(3, 4, 2)) is None
