"""Attention on PyG's packed rows: the size-grouped blocks and the one padded block equal the dense padded reference
(outputs and gradients, train and eval, empty and single-node graphs), trace under torch.compile / torch.export, and
make no host sync when the sizes are given."""

import numpy as np
import pytest
import torch
from torch_geometric.utils import to_dense_batch

from gea_graph.nn import GEAETLayer
from gea_graph.nn.attention import ATTENTIONS, attention_resolver, from_dense, to_dense
from gea_graph.nn.attention.plan import AttentionPlan, plan_groups
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
    return ("auto", "grouped", "dense")


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


def test_impls_are_checked_and_agf_takes_no_bias():
    for name in ATTENTIONS:
        for impl in ("padded", "packed"):
            with pytest.raises(ValueError, match=f"attn_impl: '{impl}'"):
                attention_resolver(name, C, H, impl=impl)
    x, _, ptr = packed_batch()
    plan = AttentionPlan(ptr, x.size(0)).with_bias(torch.zeros(len(SIZES), H, 30, 30))
    assert attention_resolver("softmax", C, H).resolve_impl(plan) == "grouped"
    with pytest.raises(ValueError, match="cannot apply an additive 'attn_bias'"):
        attention_resolver("agf", C, H)(x, plan)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_stored_and_returned_weights_keep_the_dense_layout(name):
    x, batch, ptr = packed_batch()
    mod = make(name)
    xd, mask = to_dense(x, batch)
    ref, ref_attn = mod(xd, mask, return_attention=True)
    out, attn = mod(x, AttentionPlan(ptr, x.size(0)), return_attention=True)
    torch.testing.assert_close(out, from_dense(ref, mask), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn, ref_attn, atol=1e-5, rtol=1e-5)


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


@pytest.mark.parametrize("name", ["softmax"])
def test_attention_on_a_plan_compiles_once_per_batch_kind(name):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    mod = make(name)

    def step(x, ptr):  # the largest graph given as a bound (the models give it per batch)
        return mod(x, AttentionPlan(ptr, x.size(0), 32))

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, dynamic=True, fullgraph=True, backend=counter)
    stream = ((3, 5, 2), (7, 1, 4, 9), (5, ), (0, 3, 1), (10, 20, 3, 1, 1), (1, ))
    for i, sizes in enumerate(stream):
        x, _, ptr = packed_batch(sizes)
        x.requires_grad_()
        out = compiled(x, ptr)
        torch.testing.assert_close(out, step(x, ptr))
        if out.numel():
            out.sum().backward()
        # once per kind of batch: several graphs, one graph, one node (torch specialises a size of 1)
        kinds = len({(len(s) == 1, sum(s) == 1) for s in stream[:i + 1]})
        graphs = sum(len(g.graph.nodes) > 2 for g in counter.graphs)  # dynamo adds an empty frame beside each
        assert graphs == kinds, f"recompiled for sizes {sizes}"
    assert torch._dynamo.explain(step)(x, ptr).graph_break_count == 0


def test_attention_on_a_plan_exports():
    mod = make("softmax")

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = mod

        def forward(self, x, ptr):
            return self.attn(x, AttentionPlan(ptr, x.size(0), 32))

    x, _, ptr = packed_batch()
    program = torch.export.export(Wrapper(), (x, ptr), dynamic_shapes={
        "x": {0: torch.export.Dim("nodes")}, "ptr": {0: torch.export.Dim("graphs_plus_one", min=3)}})
    x2, _, ptr2 = packed_batch((4, 9, 1), seed=1)
    torch.testing.assert_close(program.module()(x2, ptr2), Wrapper()(x2, ptr2))


def test_auto_runs_grouped_on_cpu_and_dense_elsewhere():
    # "auto": grouped blocks on CPU (which pays for every padded entry), the padded batch on a GPU (which pays per
    # kernel launch); an explicit impl wins; asking for the weights runs dense (their [B, H, N, N] layout).
    from gea_graph.nn.attention.agf import AGFAttention
    from gea_graph.nn.attention.multihead import MultiheadAttention

    known = AttentionPlan(torch.tensor([0, 3, 7], device="meta"), 7, 4, node_counts=[3, 4])  # not the CPU
    cpu = AttentionPlan(torch.tensor([0, 3, 7]), 7, 4)
    for name in ("softmax", "gfsa", "plaplacian"):
        attn = attention_resolver(name, 8, 2)
        assert (attn.resolve_impl(known), attn.resolve_impl(cpu)) == ("dense", "grouped")
        assert attn.resolve_impl(cpu, need_weights=True) == "dense"
    assert MultiheadAttention(8, 2, impl="grouped").resolve_impl(known) == "grouped"
    assert MultiheadAttention(8, 2, impl="dense").resolve_impl(cpu) == "dense"

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
