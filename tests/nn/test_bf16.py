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


@pytest.mark.parametrize("native", ["1", "0"])
def test_gea_softmax_runs_in_float32_under_autocast(native, monkeypatch):
    monkeypatch.setenv("GEA_GRAPH_NATIVE", native)
    seen = []
    if native == "1":  # the native kernel: it gets float32 rows and weights
        kernel_for = ea._kernel_for

        def spy(x, *args):
            kernel = kernel_for(x, *args)
            if kernel is not None:
                seen.append((x.dtype, ) * 4)
            return kernel

        monkeypatch.setattr(ea, "_kernel_for", spy)
    else:  # the PyTorch path of the group softmax (small logits)
        exponentials = ea._unnormalized_exponentials

        def spy(x, w_kt, *args, **kwargs):
            e, sums = exponentials(x, w_kt, *args, **kwargs)
            seen.append((x.dtype, w_kt.dtype, e.dtype, sums.dtype))
            return e, sums

        monkeypatch.setattr(ea, "_unnormalized_exponentials", spy)
    att = ea.ExternalAttention(16, 4)
    x, batch = torch.randn(7, 16), torch.tensor([0, 0, 0, 1, 1, 1, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = att(torch.nn.Linear(16, 16)(x), batch, num_graphs=2)  # a bf16 input, as in a model
    assert out.dtype == torch.bfloat16  # the layer's output follows autocast ...
    assert seen == [(torch.float32, ) * 4]  # ... its normalisation does not
