r"""A captured fixed-size training step replayed against eager mode: ``gea-graph selfcheck``'s check that a whole
step compiled with ``trainer.compile: reduce-overhead`` (a CUDA graph on a GPU) computes what eager mode computes.
"""
from __future__ import annotations

import copy

import numpy as np
import torch

#: Graph sizes of the replayed batches: different graphs, one fixed shape (a one-node graph among them).
BATCHES = ((5, 9, 7, 1, 12), (3, 12, 4, 8, 6), (11, 2, 9, 6, 5))


def replay_gap(device: torch.device, recipe_name: str = "geaet-zinc-quick", steps: int = 3) -> tuple[float, int]:
    r"""Trains two copies of a small fixed-size model side by side for ``steps`` steps on the same batches, one
    eager and one with its forward and loss compiled (``reduce-overhead`` on CUDA, so the step is captured once
    and replayed; ``aot_eager`` elsewhere), both with the fused, capturable AdamW, and checks the losses, gradients
    and parameters of every step to 1e-5 in fp32. Returns ``(largest gap, compiled graphs)``."""
    from torch._dynamo.utils import counters

    from gea_graph.models.synthetic import synthetic_batch
    from gea_graph.train import fixed_size, load_recipe
    from gea_graph.train.module import GraphTask, build_optimizer

    overrides = ["model.hidden=32", "model.layers=2", "model.dropout=0.0", "model.attn_dropout=0.0",
                 "model.attn_impl=dense", "trainer.fixed_size=true"]
    recipe = load_recipe(recipe_name, overrides)
    mode = "reduce-overhead" if device.type == "cuda" else "aot_eager"
    tasks = []
    for compiled in (False, mode):
        raw = recipe.to_dict()
        raw["trainer"]["compile"] = compiled
        torch.manual_seed(0)
        tasks.append(GraphTask(raw).to(device).train())
    tasks[1].load_state_dict(copy.deepcopy(tasks[0].state_dict()))
    optimizers = [build_optimizer(t.parameters(), recipe.optim, fused=True) for t in tasks]
    batches = [synthetic_batch(recipe.model, recipe.data.pe, sizes, seed=i) for i, sizes in enumerate(BATCHES)]
    nodes = np.array([s for sizes in BATCHES for s in sizes])
    shape = fixed_size.plan_shapes(nodes, 2 * np.maximum(nodes - 1, 0), len(BATCHES[0]))[-1]
    torch.compiler.reset()
    counters.clear()
    worst = 0.0
    for step in range(steps):
        batch = fixed_size.pad_batch(batches[step % len(batches)], shape)
        losses = []
        for task, optimizer in zip(tasks, optimizers):
            moved = copy.copy(batch).to(device)
            moved.__dict__["_gea_host_sizes"] = {"max_num_nodes": shape.max_nodes}
            loss = task.training_step(moved, step)
            loss.backward()
            losses.append(loss.detach().clone())
        pairs = [(losses[1], losses[0])] + [  # a parameter no loss reaches: None in eager, zeros when compiled
            (torch.zeros_like(b) if b.grad is None else b.grad, torch.zeros_like(a) if a.grad is None else a.grad)
            for a, b in zip(tasks[0].parameters(), tasks[1].parameters())]
        for i, (got, want) in enumerate(pairs):
            what = f"step {step}, {'loss' if i == 0 else f'gradient {i}'}"
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m, what=what: f"{what}: {m}")
            worst = max(worst, float((got - want).abs().max()))
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        # Adam turns gradient noise of 1e-9 on a near-zero gradient into a full step of either sign: the next step
        # starts from the eager parameters again (copied in place: the captured graph reads the same storage)
        with torch.no_grad():
            for a, b in zip(tasks[0].parameters(), tasks[1].parameters()):
                b.copy_(a)
    return worst, int(counters["stats"]["unique_graphs"])
