"""LapPE variants of the authors' code (GraphGPS posenc_stats): combinatorial Laplacian, trivial eigenpair kept,
NaN padding; their spec syntax and their place in the dataset cache key."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gea_graph.data.base import cache_key
from gea_graph.nn import LapPEEncoder
from gea_graph.transforms import LapPE, parse_pe

AUTHORS = "lap:10:norm=none:trivial=keep:pad=nan"


def path(n):
    ei = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    return Data(edge_index=torch.cat([ei, ei.flip(0)], 1), num_nodes=n)


def test_keep_trivial_is_the_k_smallest_pairs_of_d_minus_a():
    n, k = 12, 5
    a = np.diag(np.ones(n - 1), 1)
    a = a + a.T
    lam, vec = np.linalg.eigh(np.diag(a.sum(1)) - a)  # a path: distinct eigenvalues
    out = LapPE(k, normalization=None, keep_trivial=True)(path(n))
    np.testing.assert_allclose(out.lap_eigval[0].numpy(), np.maximum(lam[:k], 0), atol=1e-5)
    assert 0.0 <= out.lap_eigval[0, 0] < 1e-6  # lambda = 0 (clamped at 0, as GraphGPS)
    got = out.lap_eigvec.numpy()
    for j in range(k):  # up to sign
        sign = np.sign(got[:, j] @ vec[:, j])
        np.testing.assert_allclose(sign * got[:, j], vec[:, j], atol=1e-5)
    np.testing.assert_allclose(np.abs(got[:, 0]), 1 / np.sqrt(n), atol=1e-6)  # the constant vector
    dropped = LapPE(k, normalization=None)(path(n))
    np.testing.assert_allclose(dropped.lap_eigval[0].numpy(), lam[1:k + 1], atol=1e-5)


def test_nan_padding_of_small_graphs_and_encoder_ignores_it():
    t = parse_pe(AUTHORS)
    assert isinstance(t, LapPE) and t.normalization is None and t.keep_trivial and t.padding == "nan"
    small = t(path(4))  # 4 eigenpairs (lambda = 0 included), 6 padded
    assert torch.isfinite(small.lap_eigvec[:, :4]).all() and torch.isnan(small.lap_eigvec[:, 4:]).all()
    assert torch.isnan(small.lap_eigval[:, 4:]).all() and torch.equal(small.lap_mask[:, :4].all(0),
                                                                         torch.ones(4, dtype=torch.bool))
    assert not small.lap_mask[:, 4:].any()
    zero = LapPE(10, normalization=None, keep_trivial=True)(path(4))
    assert (zero.lap_eigvec[:, 4:] == 0).all()
    enc = LapPEEncoder(16, sign_scope="batch").train()
    out_nan = enc(None, (small.lap_eigvec, small.lap_eigval, small.lap_mask))
    enc.eval()
    assert torch.isfinite(out_nan).all()
    torch.testing.assert_close(enc(None, (small.lap_eigvec, small.lap_eigval, small.lap_mask)),
                               enc(None, (zero.lap_eigvec, zero.lap_eigval, zero.lap_mask)))


def test_spec_options_defaults_and_errors():
    default = parse_pe("lap:10")
    assert (default.normalization, default.keep_trivial, default.padding) == ("sym", False, "zero")
    assert parse_pe("lap:10:pad=nan,rw:4").transforms[0].padding == "nan"
    with pytest.raises(ValueError, match="norm=sym|none"):
        parse_pe("lap:10:norm=rw")
    with pytest.raises(ValueError, match="'trivial'"):
        parse_pe("lap:10:trivial")
    with pytest.raises(ValueError, match="rw takes none"):
        parse_pe("rw:10:pad=nan")
    with pytest.raises(ValueError, match="padding"):
        LapPE(4, padding="mean")


def test_every_lap_option_is_in_the_cache_key():
    keys = {cache_key(parse_pe(s)) for s in ("lap:10", "lap:10:norm=none", "lap:10:trivial=keep",
                                             "lap:10:pad=nan", AUTHORS, "lap:8")}
    assert len(keys) == 6
    assert cache_key(parse_pe("lap:10:norm=sym:trivial=drop:pad=zero")) == cache_key(parse_pe("lap:10"))
