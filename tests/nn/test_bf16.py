"""A bf16-autocast training step of every model family on CPU is finite, and GEA's softmax runs in float32."""
import sys
from pathlib import Path

import pytest
import torch

import gea_graph.nn.external_attention as ea
from gea_graph.models import build_model
from gea_graph.train import load_recipe

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from test_model_recipes import synthetic_batch

RECIPES = ["geaet-zinc-cpu", "gatedgcn-zinc-cpu", "gcn-zinc-cpu", "graphormer-zinc-cpu",
           "graphormer-gfsa-zinc-cpu", "graphormer-plaplacian-zinc-cpu", "graphormer-agf-zinc-cpu",
           "pyg-gps-zinc", "pyg-gine-zinc"]


@pytest.mark.parametrize("name", RECIPES)
def test_bf16_autocast_training_step_is_finite(name):
    recipe = load_recipe(name)
    torch.manual_seed(0)
    model = build_model(recipe.model)
    batch = synthetic_batch(recipe)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(batch)
        loss = (out.float() - batch.y.float().view_as(out)).abs().mean()
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_gea_softmax_runs_in_float32_under_autocast(monkeypatch):
    seen = []
    log_softmax = ea.group_log_softmax

    def spy(logits, *args):
        seen.append(logits.dtype)
        return log_softmax(logits, *args)

    monkeypatch.setattr(ea, "group_log_softmax", spy)
    att = ea.ExternalAttention(16, 4)
    x, batch = torch.randn(7, 16), torch.tensor([0, 0, 0, 1, 1, 1, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = att(torch.nn.Linear(16, 16)(x), batch, num_graphs=2)  # a bf16 input, as in a model
    assert out.dtype == torch.bfloat16  # the layer's output follows autocast ...
    assert seen == [torch.float32]  # ... its normalisation does not
