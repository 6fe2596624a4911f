"""LapPEEncoder (GraphGPS DeepSet with sign flips) and RWPEEncoder."""
import pytest
import torch

from gea_graph.nn import LapPEEncoder, RWPEEncoder
from gea_graph.nn.pe_encoders import NarrowLinear

count = lambda m: sum(p.numel() for p in m.parameters())


def _lap(n=6, k=4, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    vec = torch.randn(n, k, generator=g, dtype=dtype)
    val = torch.rand(1, k, generator=g, dtype=dtype).expand(n, k).clone()
    mask = torch.ones(n, k, dtype=torch.bool)
    mask[:, -1] = False  # a padded eigenpair
    vec[:, -1] = 0.0
    val[:, -1] = 0.0
    return vec, val, mask


def test_parameter_counts_of_the_paper():
    assert count(LapPEEncoder(16, num_layers=2)) == 624  # Peptides-Struct LapPE DeepSet, k=10
    assert count(RWPEEncoder(16, 7)) == 151  # PATTERN RWSE: BN(16) + Linear(16 -> 7)
    assert count(RWPEEncoder(16, 7, in_channels=3, out_channels=64)) == 379  # + Linear(3 -> 57)


def test_deepset_matches_naive():
    torch.manual_seed(0)
    enc = LapPEEncoder(5, num_layers=3).double().eval()
    vec, val, mask = _lap()
    x = torch.randn(6, 3, dtype=torch.float64)
    out = enc(x, vec, val, mask)
    ref = torch.zeros(6, 5, dtype=torch.float64)
    for i in range(6):
        for j in range(4):
            if mask[i, j]:
                ref[i] += enc.encoder(torch.stack([vec[i, j], val[i, j]]))
    torch.testing.assert_close(out, torch.cat([x, ref], -1))
    # tuple form, NaN padding (GraphGPS style) and [N, k, 1] eigenvalues give the same
    vec_nan = vec.clone()
    vec_nan[:, -1] = float("nan")
    torch.testing.assert_close(enc(x, (vec_nan, val.unsqueeze(-1))), out)
    torch.testing.assert_close(enc(None, (vec, val, mask)), ref)


@pytest.mark.parametrize("bias", [True, False])
def test_narrow_linear_is_a_linear(bias):
    """The DeepSet's first layer: nn.Linear's parameters, output and gradients (formed as X^T G)."""
    torch.manual_seed(0)
    ref = torch.nn.Linear(2, 6, bias=bias).double()
    ours = NarrowLinear(2, 6, bias=bias).double()
    ours.load_state_dict(ref.state_dict())
    assert list(ours.state_dict()) == list(ref.state_dict())
    x = torch.randn(5, 3, 2, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, 3, 6, dtype=torch.float64)
    out = ours(x)
    torch.testing.assert_close(out, ref(x))
    grads = torch.autograd.grad(out, [x, *ours.parameters()], g)
    grads_ref = torch.autograd.grad(ref(x), [x, *ref.parameters()], g)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(ours, (x,))
    assert isinstance(LapPEEncoder(4).encoder[0], NarrowLinear)
    assert isinstance(LapPEEncoder(4, num_layers=1).encoder[0], NarrowLinear)


def test_linear_model_add_mode_and_internal_map():
    torch.manual_seed(0)
    enc = LapPEEncoder(8, model="linear", k=4, mode="add").double().eval()
    vec, val, mask = _lap()
    x = torch.randn(6, 8, dtype=torch.float64)
    feats = torch.cat([vec * mask, val * mask], -1)
    torch.testing.assert_close(enc(x, vec, val, mask), x + enc.encoder(feats))
    with pytest.raises(ValueError):
        enc(torch.randn(6, 3, dtype=torch.float64), vec, val, mask)
    enc = LapPEEncoder(4, in_channels=3, out_channels=10)
    assert enc(torch.randn(6, 3), _lap(dtype=torch.float32)[0], _lap(dtype=torch.float32)[1]).shape == (6, 10)
    with pytest.raises(ValueError):
        LapPEEncoder(4, model="linear")


def test_padding_is_ignored_and_equivariance():
    torch.manual_seed(0)
    enc = LapPEEncoder(5, k=4, raw_norm=True).double().eval()
    vec, val, mask = _lap()
    out = enc(None, vec, val, mask)
    vec2, val2 = vec.clone(), val.clone()
    vec2[:, -1], val2[:, -1] = 7.0, 3.0  # garbage in the padded slot
    torch.testing.assert_close(enc(None, vec2, val2, mask), out)
    perm = torch.randperm(6)
    torch.testing.assert_close(enc(None, vec[perm], val[perm], mask[perm]), out[perm])


def test_sign_flip_in_training_only():
    torch.manual_seed(0)
    enc = LapPEEncoder(5).double()
    vec, val, mask = _lap(k=8)
    mask[:] = True
    outs = [enc.train()(None, vec, val, mask) for _ in range(4)]
    assert any(not torch.allclose(outs[0], o) for o in outs[1:])
    # each training output equals the eval output of some sign pattern
    enc.eval()
    assert torch.equal(enc(None, vec, val, mask), enc(None, vec, val, mask))
    # per-graph flips with a batch vector: runs and stays finite
    enc.train()
    out = enc(None, vec, val, mask, batch=torch.tensor([0, 0, 0, 1, 1, 1]))
    assert torch.isfinite(out).all()
    no_flip = LapPEEncoder(5, sign_flip=False).double().train()
    torch.testing.assert_close(no_flip(None, vec, val, mask), no_flip(None, vec, val, mask))


def test_rwpe_matches_reference():
    torch.manual_seed(0)
    enc = RWPEEncoder(5, 3).double().eval()
    pe = torch.rand(6, 5, dtype=torch.float64)
    x = torch.randn(6, 4, dtype=torch.float64)
    bn = enc.norm
    ref = enc.lin((pe - bn.running_mean) / (bn.running_var + bn.eps).sqrt())
    torch.testing.assert_close(enc(x, pe), torch.cat([x, ref], -1))
    add = RWPEEncoder(5, 4, norm=False, mode="add").double()
    torch.testing.assert_close(add(x, pe), x + add.lin(pe))
    assert RWPEEncoder(5, 3, in_channels=2, out_channels=8)(torch.randn(6, 2), pe.float()).shape == (6, 8)


def test_gradients_dtypes_autocast_degenerate():
    torch.manual_seed(0)
    for enc, args in (
        (LapPEEncoder(4, k=3, raw_norm=True, in_channels=3, out_channels=8), None),
        (RWPEEncoder(3, 4, in_channels=3, out_channels=8), None),
    ):
        x = torch.randn(5, 3)
        pe = (torch.randn(5, 3), torch.rand(5, 3), torch.ones(5, 3, dtype=torch.bool)) \
            if isinstance(enc, LapPEEncoder) else torch.rand(5, 3)
        x0 = x.clone()
        out = enc(x, pe)
        assert torch.equal(x, x0)
        out.square().sum().backward()
        for name, p in enc.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.isfinite(enc(x, pe)).all()
        enc.double()
        pe64 = tuple(t.double() if t.is_floating_point() else t for t in pe) \
            if isinstance(pe, tuple) else pe.double()
        assert enc(x.double(), pe64).dtype == torch.float64
        # a single node in training (BatchNorm falls back to running stats)
        one = tuple(t[:1] for t in pe64) if isinstance(pe64, tuple) else pe64[:1]
        assert torch.isfinite(enc.train()(x.double()[:1], one)).all()


def test_repr_reset():
    enc = LapPEEncoder(16)
    assert str(enc) == ("LapPEEncoder(dim_pe=16, model='deepset', num_layers=2, mode='concat', "
                        "sign_flip=True, sign_scope='graph')")
    assert str(RWPEEncoder(16, 7)) == "RWPEEncoder(walk_length=16, dim_pe=7, norm=True, mode='concat')"
    w = enc.encoder[0].weight.detach().clone()
    enc.reset_parameters()
    assert not torch.equal(w, enc.encoder[0].weight)
    with pytest.raises(ValueError):
        LapPEEncoder(4, mode="sum")


def test_sign_scope_batch_flips_all_graphs_alike():
    torch.manual_seed(0)
    vec = torch.randn(3, 4).repeat(2, 1)  # two identical 3-node graphs
    val, mask = torch.rand(3, 4).repeat(2, 1), torch.ones(6, 4, dtype=torch.bool)
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    authors = LapPEEncoder(5, sign_scope="batch").train()
    for _ in range(8):
        out = authors(None, vec, val, mask, batch=batch)
        torch.testing.assert_close(out[:3], out[3:])
    ours = LapPEEncoder(5).train()
    assert any(not torch.allclose(o[:3], o[3:]) for o in (ours(None, vec, val, mask, batch=batch)
                                                          for _ in range(8)))
    with pytest.raises(ValueError, match="sign_scope"):
        LapPEEncoder(5, sign_scope="node")
