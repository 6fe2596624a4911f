"""Attention without padding: the packed softmax kernel and the size-grouped blocks equal the dense padded path
(outputs and gradients, train and eval, empty and single-node graphs), trace under torch.compile / torch.export, and
make no host sync when the sizes are given."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch_geometric.utils import to_dense_batch

from gea_graph.nn import GEAETLayer
from gea_graph.nn.attention import ATTENTIONS, attention_resolver, from_dense, to_dense
from gea_graph.nn.attention.packed import (
    _packed_attention_cpu,
    block_mask_from_ptr,
    packed_attention,
    packed_backend,
    packed_qkv_attention,
    pad_head_dim,
)
from gea_graph.nn.attention.plan import AttentionPlan, plan_groups
from gea_graph.nn.compiling import DynamicCompiled
from gea_graph.nn.dropout import scaled_keep_mask
from gea_graph.nn.sync_census import SyncCensus

C, H = 16, 2
#: Mixed sizes: empty graphs, single-node graphs, and sizes far apart (several blocks).
SIZES = (3, 0, 1, 7, 5, 0, 2, 12, 1, 6, 6, 30, 4)


def packed_batch(sizes=SIZES, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), C, generator=g, dtype=dtype)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    ptr = torch.tensor((0, ) + tuple(sizes)).cumsum(0)
    return x, batch, ptr


def make(name, dtype=torch.float32, **kw):
    torch.manual_seed(0)
    mod = attention_resolver(name, C, H, **kw).to(dtype)
    with torch.no_grad():  # move off the plain-softmax inits so that every term matters
        if name == "gfsa":
            mod.w0.fill_(0.2)
            mod.wK.copy_(torch.tensor([0.5, -0.7]))
        if name == "agf":
            mod.theta.copy_(torch.tensor([0.3, -0.5, 0.8]))
    return mod


def dense_reference(mod, x, batch, sizes, bias=None):
    xd, mask = to_dense(x, batch, batch_size=len(sizes))
    return from_dense(mod(xd, mask, bias), mask, x.size(0))


def impls(name):
    return ("auto", "grouped", "dense") + (("packed", ) if name == "softmax" else ())


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("name", ATTENTIONS)
def test_packed_call_equals_dense_with_gradients(name, train):
    # p-Laplacian's distances (|v_i|^2 + |v_j|^2 - 2 v_i.v_j) cancel: in float32 its output moves at the 1e-5 level
    # with the GEMM's blocking (the block size), so it is compared in float64; the others in float32.
    dtype = torch.float64 if name == "plaplacian" else torch.float32
    x, batch, ptr = packed_batch(dtype=dtype)
    for impl in impls(name):
        mod = make(name, dtype, impl=impl).train(train)
        ref_x = x.clone().requires_grad_()
        ref = dense_reference(mod, ref_x, batch, SIZES)
        g = torch.randn_like(ref)
        ref_grads = torch.autograd.grad(ref, [ref_x, *mod.parameters()], g)
        got_x = x.clone().requires_grad_()
        plan = AttentionPlan(ptr, x.size(0))
        got = mod(got_x, plan)
        got_grads = torch.autograd.grad(got, [got_x, *mod.parameters()], g)
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5, msg=f"{name} {impl}")
        for a, b in zip(got_grads, ref_grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=f"{name} {impl} gradient")
        if name == "agf" and train:
            torch.testing.assert_close(mod.aux_loss(), mod.aux_loss(), msg="aux loss")


@pytest.mark.parametrize("name", [n for n in ATTENTIONS if n != "agf"])
def test_plan_bias_equals_dense_bias_with_its_gradient(name):
    x, batch, ptr = packed_batch(dtype=torch.float64)
    B, N = len(SIZES), max(SIZES)
    for impl in ("auto", "grouped", "dense"):
        mod = make(name, torch.float64, impl=impl)
        bias = torch.randn(B, H, N, N, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
        bias[:, :, :, -1] = -1e30  # junk at padded keys (the largest graph has N nodes: a real key there too)
        ref_bias = bias.clone().requires_grad_()
        ref = dense_reference(mod, x, batch, SIZES, ref_bias)
        got_bias = bias.clone().requires_grad_()
        got = mod(x, AttentionPlan(ptr, x.size(0)).with_bias(got_bias))
        torch.testing.assert_close(got, ref, msg=f"{name} {impl}")
        g = torch.randn_like(ref)
        torch.testing.assert_close(torch.autograd.grad(got, got_bias, g)[0], torch.autograd.grad(ref, ref_bias, g)[0])


def test_packed_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="'packed'.*GFSA"):
        attention_resolver("gfsa", C, H, impl="packed")
    with pytest.raises(ValueError, match="'packed'.*AGFAttention"):
        attention_resolver("agf", C, H, impl="packed")
    with pytest.raises(ValueError, match="attn_impl: 'padded'"):
        attention_resolver("softmax", C, H, impl="padded")
    x, _, ptr = packed_batch()
    plan = AttentionPlan(ptr, x.size(0)).with_bias(torch.zeros(len(SIZES), H, 30, 30))
    with pytest.raises(ValueError, match="'packed' takes no attention bias"):
        attention_resolver("softmax", C, H, impl="packed")(x, plan)
    assert attention_resolver("softmax", C, H).resolve_impl(plan) == "grouped"
    with pytest.raises(ValueError, match="cannot apply an additive 'attn_bias'"):
        attention_resolver("agf", C, H)(x, plan)


@pytest.mark.parametrize("ptr", [[0, 3, 5], [0, 3, 9], [1, 3, 7], [0, 5, 3, 7], []])
def test_packed_kernel_refuses_a_ptr_that_does_not_cover_the_rows(ptr):
    q = torch.randn(7, H, 4)
    with pytest.raises(ValueError, match="ptr must rise from 0 to the 7 rows"):
        packed_attention(q, q, q, torch.tensor(ptr, dtype=torch.long))


def test_packed_kernel_finds_a_batchs_size_classes_once(monkeypatch):
    """Three layers on one plan, forward and backward (attention dropout on and off), find the size classes of its ptr
    once; a new ptr tensor (even with equal values) or a changed one finds them again. The results equal those of
    finding them at every call."""
    from gea_graph.nn.attention import packed
    from gea_graph.nn.batch_memo import LastBatchMemo
    found = []
    monkeypatch.setattr(packed, "_batch_size_classes",
                        LastBatchMemo(lambda ptr, n: found.append(n) or packed._size_classes(ptr, n)))
    x, _, ptr = packed_batch()
    layers = [make("softmax", dropout=p, impl="packed") for p in (0.0, 0.3, 0.0)]

    def run(ptr):
        torch.manual_seed(5)
        xi = x.clone().requires_grad_(True)
        h = xi
        for layer in layers:
            h = layer(h, AttentionPlan(ptr, x.size(0))).tanh()
        h.sum().backward()
        return h, xi.grad

    kept = run(ptr)
    assert found == [x.size(0)]
    run(ptr.clone())
    assert len(found) == 2
    ptr2 = ptr.clone()
    run(ptr2)
    ptr2.add_(0)  # in place: the version moves on
    run(ptr2)
    assert len(found) == 4
    monkeypatch.setattr(packed, "_batch_size_classes", SimpleNamespace(get=packed._size_classes))  # every call
    for a, b in zip(kept, run(ptr)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_stored_and_returned_weights_keep_the_dense_layout(name):
    x, batch, ptr = packed_batch()
    mod = make(name)
    xd, mask = to_dense(x, batch)
    ref, ref_attn = mod(xd, mask, return_attention=True)
    out, attn = mod(x, AttentionPlan(ptr, x.size(0)), return_attention=True)
    torch.testing.assert_close(out, from_dense(ref, mask), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn, ref_attn, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sizes", [SIZES, (70, 3, 70, 3, 0, 64, 65, 64)])  # large shared sizes: a call per graph
def test_packed_kernel_matches_a_loop_over_graphs_in_float64(sizes):
    q, k, v = (torch.randn(sum(sizes), H, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ptr = torch.tensor((0, ) + tuple(sizes)).cumsum(0)
    out = packed_attention(q, k, v, ptr)
    rows = []
    for s, e in zip(ptr[:-1].tolist(), ptr[1:].tolist()):
        a = torch.softmax(q[s:e].transpose(0, 1) @ k[s:e].permute(1, 2, 0) / 8 ** 0.5, -1)
        rows.append((a @ v[s:e].transpose(0, 1)).transpose(0, 1))
    ref = torch.cat(rows)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b)


def test_fused_qkv_form_returns_one_gradient_equal_to_the_three_tensor_form():
    # the layer's form: a fused projection viewed as [N, 3, H, D]; the CPU operator returns the gradient as one
    # tensor in that layout (no SelectBackward / stack of three gradients in the graph)
    ptr = torch.tensor((0, ) + SIZES).cumsum(0)
    qkv = torch.randn(sum(SIZES), 3 * H * 8, dtype=torch.float64, requires_grad=True)
    out = packed_qkv_attention(qkv.view(-1, 3, H, 8), ptr)
    q, k, v = (t.detach().requires_grad_(True) for t in qkv.view(-1, 3, H, 8).unbind(1))
    ref = packed_attention(q, k, v, ptr)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    (grad, ) = torch.autograd.grad(out, qkv, g)
    torch.testing.assert_close(grad.view(-1, 3, H, 8), torch.stack(torch.autograd.grad(ref, (q, k, v), g), 1))
    names, todo = set(), [out.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is not None:
            names.add(type(fn).__name__)
            todo += [f for f, _ in fn.next_functions]
    assert not any("Unbind" in n or "Select" in n or "Stack" in n for n in names), names
    with pytest.raises(ValueError, match=r"qkv must be \[sum N, 3, H, D\]"):
        packed_qkv_attention(qkv.view(-1, 6, H, 4)[:, :2], ptr)
    with pytest.raises(ValueError, match="q, k, v must be"):
        packed_attention(q, k, v[..., :4], ptr)


def test_packed_kernel_with_dropout_is_a_function_of_its_seed():
    # gradcheck / opcheck: the backward redraws the forward's keep masks from the seed tensor; sizes 3 and 1 are
    # shared by several graphs, so their masks are drawn and applied as one batch
    ptr = torch.tensor((0, 3, 0, 1, 3, 5, 1, 0, 3)).cumsum(0)
    q, k, v = (torch.randn(int(ptr[-1]), H, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    seed = torch.tensor(7)
    assert torch.autograd.gradcheck(
        lambda a, b, c: _packed_attention_cpu(torch.stack((a, b, c), 1), ptr, 0.5, 0.4, seed)[0], (q, k, v))
    qkv = torch.stack((q, k, v), 1).detach().requires_grad_(True)
    torch.library.opcheck(_packed_attention_cpu, (qkv, ptr, 0.5, 0.4, seed))
    torch.library.opcheck(_packed_attention_cpu, (qkv, ptr, 0.5, 0.0, None))
    # the math: dropout on the softmax weights (kept ones scaled by 1 / (1 - p)), one mask [m, H, n, n] per graph
    # size n shared by m graphs, the sizes in the order of their first graph, drawn by scaled_keep_mask from a
    # generator seeded with the seed tensor
    out = _packed_attention_cpu(torch.stack((q, k, v), 1), ptr, 0.5, 0.4, seed)[0]
    gen = torch.Generator().manual_seed(7)
    bounds = [(s, e) for s, e in zip(ptr[:-1].tolist(), ptr[1:].tolist()) if e > s]
    sizes = list(dict.fromkeys(e - s for s, e in bounds))
    keeps = {n: scaled_keep_mask((sum(e - s == n for s, e in bounds), H, n, n), 0.4, torch.float64, gen).unbind(0)
             for n in sizes}
    drawn = {n: 0 for n in sizes}
    rows = []
    for s, e in bounds:
        a = torch.softmax(0.5 * q[s:e].transpose(0, 1) @ k[s:e].permute(1, 2, 0), -1)
        keep = keeps[e - s][drawn[e - s]]
        drawn[e - s] += 1
        rows.append(((a * keep) @ v[s:e].transpose(0, 1)).transpose(0, 1))
    torch.testing.assert_close(out, torch.cat(rows))
    assert not torch.allclose(out, packed_attention(q, k, v, ptr, scale=0.5))


def test_backend_choice_by_device_and_dtype():
    assert packed_backend("cpu", torch.float32) == "cpu_flash"
    assert packed_backend("cpu", torch.bfloat16, 0.5) == "cpu_flash"
    assert packed_backend("cuda", torch.float32) == "njt"
    assert packed_backend("cuda", torch.bfloat16) == "varlen"
    assert packed_backend("cuda", torch.float16) == "varlen"
    assert packed_backend("cuda", torch.bfloat16, 0.1) == "njt"  # varlen has no dropout


def test_cuda_backends_run_their_code_on_cpu():
    # the nested-jagged path (fp32 on CUDA) runs on CPU's math kernel: forward and backward; FlexAttention has no
    # CPU backward, so its block mask and forward are checked here
    q, k, v = (torch.randn(sum(SIZES), H, 8, requires_grad=True) for _ in range(3))
    ptr = torch.tensor((0, ) + SIZES).cumsum(0)
    ref = packed_attention(q, k, v, ptr)
    njt = packed_attention(q, k, v, ptr, max(SIZES), backend="njt")
    torch.testing.assert_close(njt, ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(njt, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    flex = packed_attention(q.detach(), k.detach(), v.detach(), ptr, backend="flex")
    torch.testing.assert_close(flex, ref.detach(), atol=1e-5, rtol=1e-5)


def test_block_mask_from_ptr_lists_exactly_the_blocks_a_graph_touches():
    sizes = (5, 40, 1, 0, 70, 3, 9)
    ptr = torch.tensor((0, ) + sizes).cumsum(0)
    n, bs = int(ptr[-1]), 16
    mask = block_mask_from_ptr(ptr, n, block_size=bs)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    same = batch[:, None] == batch[None, :]
    blocks = -(-n // bs)
    padded = torch.zeros(blocks * bs, blocks * bs, dtype=torch.bool)
    padded[:n, :n] = same
    expected = padded.view(blocks, bs, blocks, bs).any(3).any(1)
    assert torch.equal(mask.to_dense()[0, 0].bool(), expected)


def test_group_plan_bounds_the_padded_work():
    rng = np.random.default_rng(0)
    for _ in range(50):
        counts = rng.integers(0, 200, size=int(rng.integers(1, 130)))
        groups = plan_groups(counts, 1.2)
        members = np.sort(np.concatenate(groups)) if groups else np.zeros(0, dtype=np.int64)
        assert np.array_equal(members, np.flatnonzero(counts > 0))  # every non-empty graph exactly once
        for g in groups:
            n = counts[g]
            assert len(g) == 1 or len(g) * int(n.max()) ** 2 <= 1.2 * float((n.astype(float) ** 2).sum())


def test_layouts_gather_scatter_and_dense_layout_is_to_dense_batch():
    x, batch, ptr = packed_batch()
    plan = AttentionPlan(ptr, x.size(0))
    dense = plan.layout(grouped=False)
    ref, mask = to_dense_batch(x, batch, batch_size=len(SIZES))
    (block, ) = dense.blocks
    torch.testing.assert_close(dense.gather(x)[0], ref)
    assert torch.equal(block.mask, mask)
    grouped = plan.layout(grouped=True)
    assert len(grouped.blocks) > 1 and grouped.work < dense.work
    for layout in (dense, grouped):
        assert torch.equal(layout.scatter(layout.gather(x)), x)
    assert plan.layout(grouped=True) is grouped  # planned once, shared


def test_no_host_sync_with_the_sizes_given():
    x, batch, ptr = packed_batch()
    counts = np.asarray(SIZES)
    layer = GEAETLayer(C, heads=H, mpnn="gine", attn="softmax").train()
    gfsa = make("gfsa")
    edge_index = torch.zeros(2, 0, dtype=torch.long)
    for mod_call in (lambda p: layer(x, edge_index, torch.zeros(0, C), batch, num_graphs=len(SIZES),
                                     max_num_nodes=max(SIZES), plan=p)[0],
                     lambda p: gfsa(x, p)):
        with SyncCensus() as census:
            plan = AttentionPlan(ptr, x.size(0), max(SIZES), node_counts=counts, batch=batch)
            mod_call(plan).sum().backward()
        assert census.count == 0, census.report()
    with SyncCensus() as census:  # without counts the grouped plan reads them: one sync
        gfsa(x, AttentionPlan(ptr, x.size(0)))
    assert census.count == 1


def test_packed_attention_compiles_once_for_a_stream_of_batches():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    mod = make("softmax")

    def step(x, ptr):
        return mod(x, AttentionPlan(ptr, x.size(0)))

    counter = CompileCounterWithBackend("aot_eager")
    compiled = DynamicCompiled(step, backend=counter)
    graphs = None
    for sizes in ((3, 5, 2), (7, 1, 4, 9), (5, ), (0, 3, 1), (10, 20, 3, 1, 1), (1, ), (0, )):
        x, _, ptr = packed_batch(sizes)
        x.requires_grad_()
        out = compiled(x, ptr)
        torch.testing.assert_close(out, step(x, ptr))
        if out.numel():
            out.sum().backward()
        graphs = graphs or counter.frame_count
        assert counter.frame_count == graphs, f"recompiled for sizes {sizes}"
    assert torch._dynamo.explain(step)(x, ptr).graph_break_count == 0


def test_packed_attention_exports():
    mod = make("softmax")

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = mod

        def forward(self, x, ptr):
            return self.attn(x, AttentionPlan(ptr, x.size(0)))

    x, _, ptr = packed_batch()
    program = torch.export.export(Wrapper(), (x, ptr), dynamic_shapes={
        "x": {0: torch.export.Dim("nodes")}, "ptr": {0: torch.export.Dim("graphs_plus_one")}})
    assert "gea_graph.packed_flash_attention" in str(program.graph)
    x2, _, ptr2 = packed_batch((4, 9, 1), seed=1)
    torch.testing.assert_close(program.module()(x2, ptr2), Wrapper()(x2, ptr2))


def test_packed_softmax_runs_the_flash_kernel_without_any_mask():
    # issue 20, finding 8: a float mask kept SDPA off its flash kernel; the packed path passes none
    from torch.profiler import profile

    x, _, ptr = packed_batch()
    mod = make("softmax")
    with profile() as prof:
        mod(x.requires_grad_(), AttentionPlan(ptr, x.size(0))).sum().backward()
    ops = {e.key for e in prof.key_averages()}
    assert {"aten::_scaled_dot_product_flash_attention_for_cpu",
            "aten::_scaled_dot_product_flash_attention_for_cpu_backward"} <= ops
    assert not ops & {"aten::masked_fill", "aten::masked_fill_", "aten::_scaled_dot_product_attention_math"}


def test_auto_runs_cpu_attention_dropout_of_small_graphs_on_grouped_blocks():
    from gea_graph.nn.attention.multihead import GROUPED_DROPOUT_MAX_NODES, MultiheadAttention

    small = AttentionPlan(torch.tensor([0, 5, 5, 12]), 12)
    large = AttentionPlan(torch.tensor([0, 3, GROUPED_DROPOUT_MAX_NODES + 4]), GROUPED_DROPOUT_MAX_NODES + 4)
    attn = MultiheadAttention(8, 2, dropout=0.3).train()
    assert attn.resolve_impl(small) == "grouped"  # the packed kernel would run explicit math per graph size
    assert attn.resolve_impl(large) == "packed"
    assert attn.eval().resolve_impl(small) == "packed"  # no dropout: the flash kernel
    assert MultiheadAttention(8, 2, dropout=0.0).train().resolve_impl(small) == "packed"
    forced = MultiheadAttention(8, 2, dropout=0.3, impl="packed").train()
    assert forced.resolve_impl(small) == "packed"
    # the same function either way: with the dropout off, the two paths agree
    forced.load_state_dict(attn.state_dict())
    x = torch.randn(12, 8)
    torch.testing.assert_close(attn.eval()(x, small), forced.eval()(x, small))


def _per_graph_reference(q, k, v, ptr, scale):
    # one SDPA call per graph: the function every packed backend computes
    out = torch.zeros_like(v)
    for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist()):
        if b > a:
            out[a:b] = torch.nn.functional.scaled_dot_product_attention(
                *(t[a:b].transpose(0, 1) for t in (q, k, v)), scale=scale).transpose(0, 1)
    return out


def test_head_sizes_off_multiples_of_8_run_zero_padded_and_exact(monkeypatch):
    # flash attention (varlen) refuses a head size off a multiple of 8 ("head_size must be a multiple of 8", seen on
    # an H200 with a 4-wide head); the CUDA backends pad with zero columns and cut the output back: the same function
    import torch.nn.attention.varlen as varlen_module

    seen = []

    def fake_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=None):
        assert q.size(-1) % 8 == 0 and v.size(-1) % 8 == 0, "the kernel got an unpadded head"
        assert cu_q.dtype == torch.int32 and max_q == max_k
        seen.append(q.size(-1))
        return _per_graph_reference(q, k, v, cu_q.long(), scale)

    monkeypatch.setattr(varlen_module, "varlen_attn", fake_varlen)
    ptr = torch.tensor((0, ) + SIZES).cumsum(0)
    for width in (4, 6, 8, 13):
        q, k, v = (torch.randn(sum(SIZES), H, width, dtype=torch.float64, requires_grad=True) for _ in range(3))
        ref = _per_graph_reference(q, k, v, ptr, width ** -0.5)
        g = torch.randn_like(ref)
        for backend in ("varlen", "njt"):
            out = packed_attention(q, k, v, ptr, max(SIZES), backend=backend)
            assert out.shape == v.shape
            torch.testing.assert_close(out, ref)
            for a, b in zip(torch.autograd.grad(out, (q, k, v), g),
                            torch.autograd.grad(ref, (q, k, v), g, retain_graph=True)):
                torch.testing.assert_close(a, b)
    assert seen == [8, 8, 8, 16]
    x = torch.randn(2, 3, 6)
    assert pad_head_dim(x).shape == (2, 3, 8) and torch.equal(pad_head_dim(x)[..., :6], x)
    assert pad_head_dim(pad_head_dim(x)) is not x and pad_head_dim(torch.randn(4, 16)).shape == (4, 16)


def test_njt_gets_both_sequence_bounds_and_no_empty_graph(monkeypatch):
    # The nested-jagged SDPA reads a missing min or max sequence length from the offsets (a host sync, and a graph
    # break under torch.compile, both seen on an H200) and refuses its fused kernels for a zero-length sequence: the
    # layer hands it the plan's non-empty graphs with both sizes cached.
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        calls.append([(t._maybe_min_seqlen, t._maybe_max_seqlen, t.offsets().tolist()) for t in (q, k, v)])
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    x, _, ptr = packed_batch()
    plan = AttentionPlan(ptr, x.size(0), max(SIZES), node_counts=SIZES)
    with SyncCensus() as census:
        jagged_ptr, smallest, largest = plan.jagged()
    assert census.count == 0, census.report()
    nonempty = [n for n in SIZES if n]
    assert jagged_ptr.tolist() == np.concatenate([[0], np.cumsum(nonempty)]).tolist()
    assert (smallest, largest) == (1, 30) and plan.jagged()[0] is jagged_ptr  # built once per batch
    full = AttentionPlan(torch.tensor([0, 2, 7]), 7, node_counts=[2, 5])
    assert full.jagged() == (full.ptr, 2, 5)  # no empty graph: ptr itself
    assert AttentionPlan(torch.tensor([0, 0, 0]), 0, node_counts=[0, 0]).jagged()[1:] == (0, 0)

    q, k, v = (torch.randn(x.size(0), H, C // H) for _ in range(3))
    packed_attention(q, k, v, jagged_ptr, largest, backend="njt", min_num_nodes=smallest)
    assert calls[-1] == [(1, 30, jagged_ptr.tolist())] * 3
    # the same rows either way: with the empty graphs in ptr (min 0, the math path) or dropped
    out = packed_attention(q, k, v, ptr, max(SIZES), backend="njt", min_num_nodes=0)
    torch.testing.assert_close(out, packed_attention(q, k, v, jagged_ptr, largest, backend="njt",
                                                     min_num_nodes=smallest))
    assert packed_attention(q[:0], k[:0], v[:0], torch.tensor([0]), backend="njt").shape == (0, H, C // H)


def test_auto_on_a_gpu_runs_dense_except_half_precision_softmax(monkeypatch):
    # On a GPU "auto" runs the padded path (an H200 ran it in 0.31x the nested-jagged kernel's time and 0.33x the
    # grouped blocks'), except where the packed kernel is varlen: softmax, half precision, no dropout in training.
    from gea_graph.nn.attention.agf import AGFAttention
    from gea_graph.nn.attention.multihead import MultiheadAttention

    attn = MultiheadAttention(8, 2, dropout=0.1).eval()
    gpu_like = AttentionPlan(torch.tensor([0, 3, 7], device="meta"), 7, 4)  # a device that is not the CPU
    known = AttentionPlan(torch.tensor([0, 3, 7], device="meta"), 7, 4, node_counts=[3, 4])
    cpu = AttentionPlan(torch.tensor([0, 3, 7]), 7, 4)
    assert attn.resolve_impl(gpu_like) == "dense"  # float32 (the default dtype): no varlen kernel
    assert attn.resolve_impl(gpu_like, dtype=torch.float32) == "dense"
    for half in (torch.bfloat16, torch.float16):
        assert attn.resolve_impl(gpu_like, dtype=half) == "packed"  # eager: the sizes are read once per batch
    assert attn.train().resolve_impl(known, dtype=torch.bfloat16) == "dense"  # varlen has no dropout
    assert MultiheadAttention(8, 2).train().resolve_impl(known, dtype=torch.bfloat16) == "packed"
    assert attn.eval().resolve_impl(cpu) == "packed"  # CPU: the flash kernels, as before
    assert attn.resolve_impl(known.with_bias(torch.zeros(2, 2, 4, 4, device="meta")),
                             dtype=torch.bfloat16) == "dense"
    assert attention_resolver("gfsa", 8, 2).resolve_impl(known, dtype=torch.bfloat16) == "dense"
    assert attention_resolver("gfsa", 8, 2).resolve_impl(cpu) == "grouped"
    assert MultiheadAttention(8, 2, impl="grouped").resolve_impl(gpu_like) == "grouped"  # explicit wins
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    # varlen needs the smallest graph's size: a host value, not traceable without the counts
    assert attn.eval().resolve_impl(gpu_like, dtype=torch.bfloat16) == "dense"
    assert attn.resolve_impl(known, dtype=torch.bfloat16) == "packed"
    assert attn.resolve_impl(cpu) == "packed"  # the CPU kernel reads ptr inside its custom operator
    monkeypatch.undo()

    class Stop(Exception):
        pass

    def layouts(module, plan) -> list[bool]:  # the layout (grouped or not) AGF asks the plan for
        asked = []

        def record(grouped):
            asked.append(grouped)
            raise Stop

        plan.layout = record
        with pytest.raises(Stop):
            module(torch.randn(plan.num_nodes, 8, device=plan.ptr.device), plan)
        return asked

    assert layouts(AGFAttention(8, 2).to("meta"), known) == [False]
    assert layouts(AGFAttention(8, 2), AttentionPlan(torch.tensor([0, 3, 7]), 7, 4)) == [True]
    assert layouts(AGFAttention(8, 2, impl="grouped").to("meta"), known) == [True]
