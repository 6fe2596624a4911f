"""Per-atom reductions of external and self-attention maps."""

from __future__ import annotations

import math

import pytest
import torch

from gea_graph.viz.scores import (
    EXTERNAL_REDUCTIONS,
    describe_reduction,
    reduce_external,
    reduce_self,
)


def double_normalised(n: int, heads: int, units: int, seed: int = 0) -> torch.Tensor:
    logits = torch.randn(n, heads, units, generator=torch.Generator().manual_seed(seed))
    attn = logits.softmax(dim=0)
    return attn / attn.sum(dim=2, keepdim=True)


def test_received_is_a_distribution_over_atoms():
    attn = double_normalised(7, 3, 5)
    scores = reduce_external(attn)
    assert scores.shape == (7,)
    assert scores.sum().item() == pytest.approx(1.0)
    expected = (attn[:, 1] / attn[:, 1].sum(0)).mean(1)
    torch.testing.assert_close(reduce_external(attn, head=1), expected.double())
    uniform = torch.full((4, 2, 3), 1 / 3)
    torch.testing.assert_close(
        reduce_external(uniform), torch.full((4,), 0.25, dtype=torch.float64)
    )


def test_received_singles_out_the_atom_a_unit_locks_on():
    attn = torch.full((6, 1, 2), 0.5)
    attn[3, 0] = torch.tensor([0.99, 0.01])  # atom 3 dominates unit 0
    attn[:, 0, 0] = torch.tensor([0.01, 0.01, 0.01, 0.99, 0.01, 0.01])
    attn = attn / attn.sum(2, keepdim=True)
    assert reduce_external(attn).argmax().item() == 3


def test_max_and_sharpness():
    one_hot = torch.zeros(3, 2, 4)
    one_hot[:, :, 1] = 1.0
    assert torch.allclose(reduce_external(one_hot, "max"), torch.ones(3, dtype=torch.float64))
    assert torch.allclose(reduce_external(one_hot, "sharpness"), torch.ones(3, dtype=torch.float64))
    uniform = torch.full((3, 2, 4), 0.25)
    assert torch.allclose(
        reduce_external(uniform, "sharpness"), torch.zeros(3, dtype=torch.float64)
    )
    attn = double_normalised(5, 2, 4)
    expected = (1 + (attn * attn.log()).sum(2) / math.log(4)).mean(1)
    torch.testing.assert_close(reduce_external(attn, "sharpness"), expected.double())


def test_self_received_and_errors():
    attn = torch.randn(2, 5, 5).softmax(-1)
    scores = reduce_self(attn)
    torch.testing.assert_close(scores, attn.double().mean(1).mean(0))
    assert scores.sum().item() == pytest.approx(1.0)
    torch.testing.assert_close(reduce_self(attn, head=-1), attn[1].double().mean(0))
    with pytest.raises(ValueError, match="head 2 out of range"):
        reduce_self(attn, head=2)
    with pytest.raises(ValueError, match="unknown reduction 'mean'"):
        reduce_external(double_normalised(3, 1, 2), "mean")
    with pytest.raises(ValueError, match=r"\[n, H, S\]"):
        reduce_external(torch.ones(3, 4))


def test_every_reduction_has_a_caption():
    for name in (*EXTERNAL_REDUCTIONS, "self"):
        assert "mean over heads" in describe_reduction(name)
        assert "head 2" in describe_reduction(name, 2)
