"""Batch norm over the real rows of a padded batch (gea_graph.nn.norm.padding_rows): the outputs, gradients and
running statistics of torch's BatchNorm1d on the real rows alone, whatever the padding rows hold."""
import copy

import pytest
import torch
from torch_geometric.nn.norm import BatchNorm

from gea_graph.nn.norm import DistributedBatchNorm, padding_rows


def _pair(**kwargs):
    torch.manual_seed(0)
    reference = torch.nn.BatchNorm1d(3, **kwargs)
    if reference.affine:
        with torch.no_grad():
            reference.weight.uniform_(0.5, 2.0)
            reference.bias.uniform_(-1.0, 1.0)
    if reference.running_mean is not None:
        reference.running_mean.uniform_(-1.0, 1.0)
        reference.running_var.uniform_(0.5, 2.0)
    return reference, DistributedBatchNorm.convert(copy.deepcopy(reference))


def _check(reference, masked, x, mask, steps=2):
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        weight = torch.randn(x.shape, generator=gen)
        real = x[mask].clone().requires_grad_(True)
        expected = reference(real)
        (expected * weight[mask]).sum().backward()
        padded = x.clone().requires_grad_(True)
        with padding_rows(mask, torch.ones(x.size(0) + 1, dtype=torch.bool)):
            out = masked(padded)
        (out * weight).sum().backward()
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[mask], expected.detach())
        torch.testing.assert_close(padded.grad[mask], real.grad)
        assert (padded.grad[~mask] == 0).all()  # padding rows get no gradient
    with torch.no_grad():
        torch.testing.assert_close(masked(x[mask]), reference(x[mask]))  # training: a batch that is not padded
    for a, b in zip(reference.parameters(), masked.parameters()):
        torch.testing.assert_close(b.grad, a.grad)
    for a, b in zip(reference.buffers(), masked.buffers()):
        torch.testing.assert_close(b, a)
    if reference.running_mean is not None:
        reference.eval(), masked.eval()
        with padding_rows(mask):  # evaluation: the running statistics on every row
            torch.testing.assert_close(masked(x), reference(x))


@pytest.mark.parametrize("kwargs", [{}, {"momentum": None}, {"affine": False}, {"track_running_stats": False}])
@pytest.mark.parametrize("shape", [(9, 3), (9, 3, 4)])
def test_masked_batch_norm_is_batch_norm_of_the_real_rows(kwargs, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 3 + 1
    mask = torch.tensor([True, True, False, True, True, True, False, True, False])
    x[~mask] = float("inf")  # padding rows may hold anything
    reference, masked = _pair(**kwargs)
    _check(reference, masked, x, mask)


def test_one_real_row_uses_the_running_statistics_as_pyg_batch_norm_does():
    # PyG's BatchNorm takes the running statistics for a single row in training; padded, that row is one of many
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([False, False, True, False, False])
    reference = BatchNorm(3, allow_single_element=True)
    with torch.no_grad():
        reference.module.running_mean.uniform_(-1.0, 1.0)
        reference.module.weight.uniform_(0.5, 2.0)
    masked = DistributedBatchNorm.convert(copy.deepcopy(reference))
    real = x[mask].clone().requires_grad_(True)
    reference(real).pow(2).sum().backward()
    padded = x.clone().requires_grad_(True)
    with padding_rows(mask):
        out = masked(padded)
    out.pow(2).sum().backward()
    torch.testing.assert_close(out[mask], reference(real.detach()))
    torch.testing.assert_close(padded.grad[mask], real.grad)
    torch.testing.assert_close(masked.module.weight.grad, reference.module.weight.grad)
    for a, b in zip(reference.buffers(), masked.buffers()):  # not updated, nor counted
        torch.testing.assert_close(b, a)


def test_a_norm_run_twice_in_a_padded_batch_updates_its_running_statistics_twice_in_order():
    x = torch.randn(7, 3, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([True, True, True, False, True, True, False])
    reference, masked = _pair()
    other_reference, other = _pair(momentum=0.3)
    expected = reference(other_reference(reference(x[mask])))
    with padding_rows(mask):
        out = masked(other(masked(x)))
    torch.testing.assert_close(out[mask], expected)
    for a, b in zip([*reference.buffers(), *other_reference.buffers()], [*masked.buffers(), *other.buffers()]):
        torch.testing.assert_close(b, a)
