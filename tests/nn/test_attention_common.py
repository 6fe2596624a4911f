"""Properties every global attention must have (one interface, docs/design.md)."""
import pytest
import torch

from gea_graph.nn.attention import ATTENTIONS, attention_resolver, from_dense, to_dense

C, H = 8, 2


def make(name, **kw):
    torch.manual_seed(0)
    mod = attention_resolver(name, C, H, **kw)
    if name == "gfsa":  # move off the plain-softmax init so the filter matters
        with torch.no_grad():
            mod.w0.fill_(0.2)
            mod.wK.copy_(torch.tensor([0.5, -0.7]))
    if name == "agf":
        with torch.no_grad():
            mod.theta.copy_(torch.tensor([0.3, -0.5, 0.8]))
    return mod


def bias_for(name, B, N, dtype=torch.float64, seed=0):
    if name == "agf":
        return None
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, N, N, generator=g, dtype=dtype)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_permutation_equivariance(name):
    mod = make(name).double()
    x = torch.randn(1, 6, C, dtype=torch.float64)
    mask = torch.ones(1, 6, dtype=torch.bool)
    bias = bias_for(name, 1, 6)
    perm = torch.randperm(6)
    out = mod(x, mask, bias)
    pb = None if bias is None else bias[:, :, perm][:, :, :, perm]
    torch.testing.assert_close(mod(x[:, perm], mask, pb), out[:, perm])


@pytest.mark.parametrize("name", ATTENTIONS)
def test_independent_of_batch_mates_and_padding(name):
    mod = make(name).double()
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(n, C, generator=g, dtype=torch.float64) for n in (4, 7, 1, 3)]
    biases = [bias_for(name, 1, n, seed=i) for i, n in enumerate((4, 7, 1, 3))]
    alone = mod(xs[0][None], torch.ones(1, 4, dtype=torch.bool),
                None if biases[0] is None else biases[0])
    for mates, pad in [([1, 2, 3], None), ([2], 9), ([], 12)]:
        idx = [0] + mates
        x = torch.cat([xs[i] for i in idx])
        batch = torch.repeat_interleave(torch.arange(len(idx)), torch.tensor([len(xs[i]) for i in idx]))
        xd, mask = to_dense(x, batch, max_num_nodes=pad)
        N = xd.size(1)
        bias = None
        if name != "agf":
            # junk (large, even -inf) bias values on padded keys must be ignored
            bias = torch.full((len(idx), H, N, N), -1e4, dtype=torch.float64)
            bias[:, :, :, -1] = float("-inf") if N > 7 else -1e4
            for b, i in enumerate(idx):
                n = len(xs[i])
                bias[b, :, :n, :n] = biases[i][0]
                bias[b, :, n:, :] = 0.0  # padded query rows: finite
        out = mod(xd, mask, bias)
        torch.testing.assert_close(out[0, :4], alone[0], atol=1e-10, rtol=1e-9)
        assert (out[~mask] == 0).all()
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ATTENTIONS)
def test_degenerate_inputs_finite(name):
    mod = make(name).train()
    cases = [
        (torch.randn(1, 1, C), torch.ones(1, 1, dtype=torch.bool)),  # single node
        (torch.ones(2, 5, C), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]).bool()),  # identical
        (torch.randn(3, 4, C), torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]).bool()),
    ]
    for x, mask in cases:
        x = x.clone().requires_grad_()
        bias = None if name == "agf" else torch.zeros(x.size(0), H, x.size(1), x.size(1))
        out = mod(x, mask, bias)
        loss = out.sum() + (mod.aux_loss() if hasattr(mod, "aux_loss") else 0)
        loss.backward()
        assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
        for n, p in mod.named_parameters():
            assert p.grad is None or torch.isfinite(p.grad).all(), n
        mod.zero_grad()


@pytest.mark.parametrize("name", ATTENTIONS)
def test_gradients_reach_every_parameter(name):
    mod = make(name).double().train()
    x, mask = to_dense(torch.randn(7, C, dtype=torch.float64), torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    bias = bias_for(name, 2, 4)
    if bias is not None:
        bias.requires_grad_()
    out = mod(x, mask, bias)
    loss = (out ** 2).sum() + (mod.aux_loss() if name == "agf" else 0)
    loss.backward()
    for n, p in mod.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, n
    if bias is not None:
        assert bias.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ATTENTIONS)
def test_autocast_bfloat16(name):
    mod = make(name)
    x, mask = to_dense(torch.randn(7, C), torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    bias = None if name == "agf" else torch.randn(2, H, 4, 4)
    ref = mod(x, mask, bias)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = mod(x, mask, bias)
    assert torch.isfinite(out).all()
    assert (out.float()[~mask] == 0).all()
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.1)
    out.float().sum().backward()


@pytest.mark.parametrize("name", ["softmax", "gfsa", "plaplacian"])
def test_attn_bias_applied(name):
    """A -inf bias on a real key removes that key exactly as if it were padding."""
    mod = make(name).double()
    x = torch.randn(1, 5, C, dtype=torch.float64)
    mask = torch.ones(1, 5, dtype=torch.bool)
    bias = torch.zeros(1, H, 5, 5, dtype=torch.float64)
    bias[..., 4] = float("-inf")
    out = mod(x, mask, bias)
    mask2 = mask.clone()
    mask2[0, 4] = False
    out2 = mod(x, mask2)
    torch.testing.assert_close(out[0, :4], out2[0, :4])
    # and a per-head shift of a whole row changes nothing (softmax invariance)
    torch.testing.assert_close(mod(x, mask, torch.full((1, H, 5, 5), 3.0, dtype=torch.float64)),
                               mod(x, mask))


def test_dense_roundtrip():
    x = torch.randn(9, C)
    batch = torch.tensor([0, 0, 1, 1, 1, 1, 2, 3, 3])
    xd, mask = to_dense(x, batch)
    assert torch.equal(from_dense(xd, mask), x)
