"""Does a recipe's model train compiled as it does in eager mode? The check behind ``trainer.compile``.

    python scripts/compiled_vs_eager.py gcn-zinc-cpu geaet-zinc-cpu [--backend inductor] [--threads 1]

For each recipe (dropout off), the model and a copy compiled by :class:`~gea_graph.nn.compiling.DynamicCompiled` run
forward and backward on the same real training batches of several sizes, one compilation for all of them: 64, 36, 1,
32 and 64 graphs of the recipe's dataset (built in the data root if needed). Per batch it prints the largest
difference of the outputs and of the parameter gradients, relative to the largest eager value, and per recipe OK
(every difference below 1e-3), MISMATCH, or the error that stopped it, with the seconds taken (compilation included).
"""
from __future__ import annotations

import argparse
import copy
import time

import torch
from torch_geometric.data import Batch

#: Slices of the training split: batches of 64, 36, 1, 32 and 64 graphs.
BATCHES = ((0, 64), (64, 100), (200, 201), (300, 332), (400, 464))


def check(name: str, backend: str) -> str:
    from gea_graph.data import get_dataset
    from gea_graph.models import build_model
    from gea_graph.models.networks import host_sizes
    from gea_graph.nn.compiling import DynamicCompiled
    from gea_graph.train.recipe import load_recipe

    recipe = load_recipe(name, ["model.dropout=0.0", "model.attn_dropout=0.0"])
    data = get_dataset(recipe.data.name, split="train", pe=recipe.data.pe, **recipe.data.options)
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = build_model(recipe.model).train()
    twin = copy.deepcopy(eager)
    compiled = DynamicCompiled(twin, backend=backend)
    start, worst = time.perf_counter(), 0.0
    for lo, hi in BATCHES:
        batch = Batch.from_data_list([data[i] for i in range(lo, min(hi, len(data)))])
        n_max = host_sizes(batch)["max_num_nodes"]
        outs = []
        for fn in (eager, compiled):
            torch.manual_seed(1)  # the same PE sign flips on both sides
            out = fn(batch, max_num_nodes=n_max)
            out.square().sum().backward()
            outs.append(out.detach())
        out_diff = float((outs[0] - outs[1]).abs().max() / outs[0].abs().max().clamp_min(1e-12))
        # a gradient the compiled graph leaves out (GEA's key bias, which cancels) counts as zero
        pairs = [(p.grad, q.grad if q.grad is not None else torch.zeros_like(p.grad))
                 for p, q in zip(eager.parameters(), twin.parameters()) if p.grad is not None]
        scale = max(float(a.abs().max()) for a, _ in pairs)
        grad_diff = max(float((a - b).abs().max()) for a, b in pairs) / max(scale, 1e-12)
        worst = max(worst, out_diff, grad_diff)
        print(f"  {name}: {batch.num_graphs} graphs: outputs {out_diff:.1e}, gradients {grad_diff:.1e}")
        eager.zero_grad(set_to_none=True)
        twin.zero_grad(set_to_none=True)
    verdict = "OK" if worst < 1e-3 else "MISMATCH"
    return f"{name}: {verdict} (largest relative difference {worst:.1e}, {time.perf_counter() - start:.0f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="+")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.recipes:
        try:
            print(check(name, args.backend), flush=True)
        except Exception as err:  # noqa: BLE001 - report the failure and go on with the next recipe
            print(f"{name}: FAILED ({type(err).__name__}: {str(err).splitlines()[0][:200]})", flush=True)


if __name__ == "__main__":
    main()
