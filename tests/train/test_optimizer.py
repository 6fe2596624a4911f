"""The recipe's optimiser: PyTorch's fused Adam(W) where it applies, the same updates as its default loop."""
import copy

import lightning as L
import pytest
import torch

from gea_graph.models import build_model
from gea_graph.train import load_recipe
from gea_graph.train.module import GraphTask, build_optimizer
from gea_graph.train.recipe import OptimConfig


@pytest.mark.parametrize("name, weight_decay", [("adamw", 1e-2), ("adam", 1e-5)])
def test_fused_optimizer_makes_the_default_updates(name, weight_decay):
    recipe = load_recipe("gatedgcn-geanet-zinc-cpu", ["model.layers=1", "model.hidden=16"])
    torch.manual_seed(0)
    model = build_model(recipe.model)
    twin = copy.deepcopy(model)
    opt = OptimConfig(optimizer=name, lr=3e-3, weight_decay=weight_decay, betas=[0.8, 0.99], eps=1e-7)
    fused = build_optimizer(model.parameters(), opt)
    loop = build_optimizer(twin.parameters(), opt, fused=False)
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
    assert not build_optimizer([meta], opt).defaults["fused"]
    assert build_optimizer([torch.zeros(3, requires_grad=True)], opt).defaults["fused"] is True


@pytest.mark.parametrize("precision, fused", [("32-true", True), ("bf16-mixed", False)])
def test_lightning_mixed_precision_keeps_the_loop_optimizer(precision, fused):
    # Lightning refuses gradient clipping (every recipe's optim.clip) with a fused optimizer under mixed precision.
    task = GraphTask(load_recipe("gatedgcn-zinc-cpu", ["model.layers=1", "optim.horizon=epochs"]).to_dict())
    task.trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    assert bool(task.configure_optimizers()["optimizer"].defaults["fused"]) is fused
