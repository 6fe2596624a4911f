"""The native CPU kernel of GEA's external units (gea_graph/native/kernels/external_units.c) against the PyTorch path
(float64, itself tested against the naive equations in test_external_attention.py): outputs, attention maps and
every gradient, on the sizes a kernel is specialised to; what it refuses; and what it leaves behind."""
import os

import pytest
import torch
from test_external_attention import _batch as random_batch

import gea_graph.nn.external_attention as ea
from gea_graph import native
from gea_graph.nn import ExternalAttention

pytestmark = pytest.mark.skipif(ea.external_units_kernel(4, 4, 1) is None,
                                reason="no working C compiler: the native kernel is not built")


def _batch(sizes, channels, edges_per_node=2, seed=0):
    """float32 node and edge features of graphs of these sizes (test_external_attention's batch), their batch
    vector and the edges' graph ids."""
    x, batch, edge_index, edge_attr = random_batch(sizes, channels, torch.float32, edges_per_node, seed)
    return x, batch, edge_attr, batch[edge_index[0]]


def _run(m, x, batch, ea_, eb, scale, weight):
    """Outputs, maps and gradients of one forward + backward (inputs and parameters in m's dtype)."""
    dtype = next(m.parameters()).dtype
    xr = (scale * x).to(dtype).requires_grad_()
    er = (scale * ea_).to(dtype).requires_grad_()
    m.zero_grad(set_to_none=True)
    out, e_out, attn, e_attn = m(xr, batch, er, eb, return_attention=True, num_graphs=int(batch.max()) + 1)
    loss = (out * weight[0].to(dtype)).sum() + (e_out * weight[1].to(dtype)).sum()
    loss.backward()
    got = [out, e_out, attn, e_attn, xr.grad, er.grad] + [p.grad for p in m.parameters()]
    return [None if t is None else t.double() for t in got]


CASES = [
    {"channels": 64, "heads": 4},  # the recipes' 16 x 16
    {"channels": 64, "heads": 4, "edge_units": True, "shared_unit": True, "edge_head_split": "strided"},
    {"channels": 24, "heads": 2, "units": 5, "out_proj": True},  # widths that are not powers of two
    {"channels": 12, "heads": 3, "units": 33, "edge_units": True},  # 33 units: 64 lanes, 31 of them padding
    {"channels": 8, "heads": 1, "bias": False},
    {"channels": 32, "heads": 8, "norm_scope": "batch", "edge_units": True},  # one group
    {"channels": 64, "heads": 4, "eps": None},  # the authors' L1 step (GEAET paper copies)
    {"channels": 32, "heads": 4, "eps": None, "norm_scope": "batch", "edge_units": True},
]


@pytest.mark.parametrize("scale", [1.0, 40.0])  # 40: logits far beyond e's float32 range, the max shift matters
@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_native_kernel_matches_the_pytorch_path(case, scale, monkeypatch):
    sizes = [5, 1, 9, 3, 17]  # a one-node graph among them
    x, batch, ea_, eb = _batch(sizes, case["channels"])
    torch.manual_seed(0)
    kw = {k: v for k, v in case.items() if k != "channels"}
    m32 = ExternalAttention(case["channels"], **kw)
    m64 = ExternalAttention(case["channels"], **kw).double()
    m64.load_state_dict(m32.state_dict())
    g = torch.Generator().manual_seed(1)
    weight = (torch.randn(x.size(0), x.size(1), generator=g), torch.randn(ea_.size(0), x.size(1), generator=g))

    calls = []
    fused = ea._FusedExternalUnits.apply
    monkeypatch.setattr(ea._FusedExternalUnits, "apply", lambda *a: calls.append(1) or fused(*a))
    got = _run(m32, x, batch, ea_, eb, scale, weight)
    assert calls  # the kernel ran (float32, CPU, eps given)
    calls.clear()
    ref = _run(m64, x, batch, ea_, eb, scale, weight)  # float64: the PyTorch path
    assert not calls
    for a, b in zip(got, ref):
        if b is None:
            assert a is None or a.abs().max() == 0
        else:
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5 * max(1.0, b.abs().max().item()))


def test_native_kernel_graph_does_not_see_its_batch_mates():
    torch.manual_seed(0)
    m = ExternalAttention(64, heads=4)
    x, batch, _, _ = _batch([7, 3, 11], 64)
    out, _ = m(x, batch, num_graphs=3)
    alone, _ = m(x[7:10], torch.zeros(3, dtype=torch.long), num_graphs=1)
    torch.testing.assert_close(out[7:10], alone, rtol=1e-6, atol=1e-6)


def test_native_kernel_gradients_with_only_the_attention_map_used():
    torch.manual_seed(0)
    m = ExternalAttention(16, heads=4)
    x = torch.randn(6, 16, requires_grad=True)
    _, _, attn, _ = m(x, return_attention=True)
    torch.testing.assert_close(attn.sum(-1), torch.ones(6, 4))
    assert not attn.requires_grad


def test_native_kernel_refuses_a_group_index_out_of_range_or_of_the_wrong_length():
    m = ExternalAttention(16, heads=4)
    x = torch.randn(5, 16)
    with pytest.raises(ValueError, match="one entry per row"):
        m(x, torch.tensor([0, 0, 1, 1]), num_graphs=2)  # the kernel would read past the index
    with pytest.raises(IndexError, match="out of range"):
        m(x, torch.tensor([0, 0, 1, 1, 2]), num_graphs=2)  # graph 2 of 2: it would write past the sums
    with pytest.raises(IndexError, match="out of range"):
        m(x, torch.tensor([0, 0, -1, 1, 1]), num_graphs=2)


def test_native_kernel_is_off_with_the_environment_switch(monkeypatch):
    monkeypatch.setenv("GEA_GRAPH_NATIVE", "0")
    assert ea.external_units_kernel(16, 16, 4) is None


def test_without_a_compiler_the_pytorch_path_runs_with_one_warning(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    m = ExternalAttention(16, heads=4)
    x, batch = torch.randn(6, 16), torch.tensor([0, 0, 0, 1, 1, 1])
    with pytest.warns(RuntimeWarning, match="could not be built"):
        out, _ = m(x, batch, num_graphs=2)
    monkeypatch.setenv("GEA_GRAPH_NATIVE", "0")
    torch.testing.assert_close(out, m(x, batch, num_graphs=2)[0])


def test_building_a_kernel_leaves_no_file(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert ea.external_units_kernel(12, 7, 3) is not None
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("norm_scope", ["graph", "batch"])
def test_native_kernel_sums_over_a_large_batch_stay_accurate(norm_scope):
    """The weight gradients (and, with one group, the softmax sums) are sums over every row: in float32 blocks
    summed in float64 they stay within 2e-6 of float64 on 160k rows (4e-7 measured), where a running float32 sum
    was off by up to 1.5e-5 (enough for two data-parallel processes, which sum halves, to part from one process
    by 4e-4 within two epochs of the selfcheck's DDP check)."""
    torch.manual_seed(0)
    m32 = ExternalAttention(128, heads=8, norm_scope=norm_scope)
    m64 = ExternalAttention(128, heads=8, norm_scope=norm_scope).double()
    m64.load_state_dict(m32.state_dict())
    sizes = [150 + (i * 37) % 200 for i in range(80)]
    x, batch, _, _ = _batch(sizes, 128, edges_per_node=0)
    weight = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    grads = []
    for m in (m32, m64):
        dtype = next(m.parameters()).dtype
        out, _ = m(x.to(dtype), batch, num_graphs=len(sizes))
        grads.append(torch.autograd.grad((out * weight.to(dtype)).sum(), list(m.parameters())))
    for a, b in zip(*grads):
        scale = b.abs().max().item()
        if scale > 0:
            assert (a.double() - b).abs().max().item() <= 2e-6 * scale


def test_a_compiler_that_hangs_counts_as_none(monkeypatch):
    import subprocess

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout"))

    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setattr(subprocess, "run", hang)
    with pytest.warns(RuntimeWarning, match="took over"):
        assert ea.external_units_kernel(16, 16, 4) is None


def test_kernel_sources_inline_their_shared_header():
    """The compiler reads a kernel on stdin, so ``native.kernel_text`` inlines the headers of the kernels folder:
    the two kernels that sum weight gradients share one ``flush`` (and the package ships the header)."""
    from importlib import resources
    from pathlib import Path

    import tomllib

    folder = resources.files("gea_graph.native").joinpath("kernels")
    header = folder.joinpath("block_sums.h").read_text()
    for name in ("external_units.c", "lap_deepset.c"):
        assert '#include "block_sums.h"' in folder.joinpath(name).read_text()
        text = native.kernel_text(name)
        assert '#include "' not in text and text.count(header) == 1
        assert text.count("static inline void flush(") == 1
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "kernels/*.h" in pyproject["tool"]["setuptools"]["package-data"]["gea_graph.native"]
