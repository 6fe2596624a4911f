"""The recipe's optimiser: the default Adam(W) loop in training; PyTorch's fused one makes the same updates."""
import copy

import pytest
import torch

from gea_graph.models import build_model
from gea_graph.train import load_recipe
from gea_graph.train.module import build_optimizer
from gea_graph.train.recipe import OptimConfig


@pytest.mark.parametrize("name, weight_decay", [("adamw", 1e-2), ("adam", 1e-5)])
def test_fused_optimizer_makes_the_default_updates(name, weight_decay):
    recipe = load_recipe("gatedgcn-geanet-zinc-cpu", ["model.layers=1", "model.hidden=16"])
    torch.manual_seed(0)
    model = build_model(recipe.model)
    twin = copy.deepcopy(model)
    opt = OptimConfig(optimizer=name, lr=3e-3, weight_decay=weight_decay, betas=[0.8, 0.99], eps=1e-7)
    fused = build_optimizer(model.parameters(), opt, fused=True)
    loop = build_optimizer(twin.parameters(), opt)
    assert type(fused) is type(loop) is (torch.optim.Adam if name == "adam" else torch.optim.AdamW)
    assert fused.defaults["fused"] is True and not loop.defaults["fused"]
    for group in (fused.param_groups[0], loop.param_groups[0]):
        assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (3e-3, (0.8, 0.99), 1e-7,
                                                                                      weight_decay)
    params = list(model.parameters())
    generator = torch.Generator().manual_seed(1)
    for _ in range(20):
        grads = [torch.randn(p.shape, generator=generator) for p in params]
        for m, optimizer in ((model, fused), (twin, loop)):
            for p, g in zip(m.parameters(), grads):
                p.grad = g.clone()
            optimizer.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_loop_optimizer_where_fused_does_not_apply():
    opt = OptimConfig()
    meta = torch.zeros(3, device="meta", requires_grad=True)  # a device without the fused kernel
    assert not build_optimizer([meta], opt, fused=True).defaults["fused"]
    assert build_optimizer([torch.zeros(3, requires_grad=True)], opt, fused=True).defaults["fused"] is True
    assert not build_optimizer([torch.zeros(3, requires_grad=True)], opt).defaults["fused"]  # training's
