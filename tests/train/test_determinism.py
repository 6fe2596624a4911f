"""`trainer.deterministic: true` works for every loss: the losses avoid the operators that CUDA refuses under
`torch.use_deterministic_algorithms(True)` (checked on a CPU by emulating those refusals)."""
import json

import pytest
import torch
import torch.nn.functional as F

from gea_graph.selfcheck import CudaNondeterminismAudit, deterministic_algorithms
from gea_graph.train import fit, recipe_from_dict
from gea_graph.train.metrics import LOSSES, LinkTargets, cross_entropy, loss_fn

from .test_training import FAKE


def test_cross_entropy_equals_torch_without_nll_loss():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 4, generator=gen)
    target = torch.randint(0, 4, (9,), generator=gen)
    weight = torch.rand(4, generator=gen)
    torch.testing.assert_close(cross_entropy(logits, target), F.cross_entropy(logits, target))
    torch.testing.assert_close(cross_entropy(logits, target, weight), F.cross_entropy(logits, target, weight=weight))
    padded = logits.clone()
    padded[:, 3] = float("-inf")  # link ranking pads the candidates of smaller graphs with -inf
    target = target.clamp(max=2)
    torch.testing.assert_close(cross_entropy(padded, target), F.cross_entropy(padded, target))


def _inputs(name):
    gen = torch.Generator().manual_seed(1)
    pred = torch.randn(6, 3, generator=gen, requires_grad=True)
    if name in ("l1", "mse"):
        return pred, torch.randn(6, 3, generator=gen)
    if name == "bce":
        return pred, torch.randint(0, 2, (6, 3), generator=gen)
    if name == "rank":
        return pred, LinkTargets(torch.tensor([0, 2, 1, 1, 0, 2]), torch.zeros(6, 3, dtype=torch.bool),
                                 torch.zeros(6, dtype=torch.long))
    return pred, torch.tensor([0, 2, 1, 1, 0, 0])


@pytest.mark.parametrize("name", LOSSES)
def test_every_loss_avoids_what_cuda_refuses_under_deterministic_algorithms(name):
    pred, target = _inputs(name)
    audit = CudaNondeterminismAudit()
    with deterministic_algorithms(), audit:
        loss_fn(name)(pred, target).backward()
    assert not audit.found, audit.found
    assert torch.isfinite(pred.grad).all()


def test_the_audit_sees_what_cuda_would_refuse():
    x = torch.randn(4, 3, requires_grad=True)
    with CudaNondeterminismAudit() as audit:
        F.cross_entropy(x, torch.tensor([0, 1, 2, 1])).backward()  # NLLLoss: what the losses used before
        torch.cumsum(x.detach(), 0)
        torch.cumsum(torch.ones(3, dtype=torch.long), 0)  # integer sums are deterministic
        torch.bincount(torch.tensor([1, 2]))
    assert audit.found == {"nll_loss_forward", "cumsum"}


def test_deterministic_recipe_trains_and_keeps_the_callers_flags(tmp_path):
    raw = json.loads(json.dumps(FAKE))
    raw["trainer"].update(max_epochs=1, deterministic=True)
    assert not torch.are_deterministic_algorithms_enabled()
    result = fit(recipe_from_dict(raw, name="fake"), tmp_path / "run", progress=False, verbose=False,
                 accelerator="cpu", devices=1)
    assert result["deterministic"] is True and result["precision"] == "32-true"
    assert not torch.are_deterministic_algorithms_enabled()  # fit turned it on for the run only
