#!/usr/bin/env python
r"""CPU seconds of a training step (forward, loss, backward, AdamW) of one recipe under two or more sets of overrides,
timed in one process and interleaved round by round, so that a loaded machine slows every variant alike.

    python scripts/ab_step.py geaet-peptides-func-cpu --variant model.attn_impl=grouped \
        --variant model.attn_impl=dense --batches 4 --rounds 3

Every variant gets the same initial weights (seed 0) and the same batches of the recipe's training split (its batch
size, shuffled with seed 0). Prints each round's milliseconds per step and the medians' ratio to the first variant.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch_geometric.loader import DataLoader

from gea_graph.models import build_model
from gea_graph.train.data import load_datasets
from gea_graph.train.metrics import loss_fn, prepare, resolve_task
from gea_graph.train.recipe import load_recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--variant", action="append", required=True, metavar="KEY=VALUE[,KEY=VALUE]",
                        help="overrides of one variant (repeat: two or more variants)")
    parser.add_argument("--batches", type=int, default=6, help="timed steps per round and variant")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    recipes = {v: load_recipe(args.recipe, [o for o in v.split(",") if o]) for v in args.variant}
    first = next(iter(recipes.values()))
    train = load_datasets(first.data)["train"]
    loader = DataLoader(train, batch_size=first.trainer.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    batches = [batch for _, batch in zip(range(args.batches), loader)]
    runs = {}
    for variant, recipe in recipes.items():
        torch.manual_seed(0)
        model = build_model(recipe.model)
        loss = loss_fn(resolve_task(recipe.model, recipe.trainer.loss)[0])
        runs[variant] = (model, torch.optim.AdamW(model.parameters(), lr=recipe.optim.lr), (recipe.model.task, loss))

    def step(model, optimizer, task_loss, batch) -> None:
        task, loss = task_loss
        optimizer.zero_grad()
        out = model(batch)
        loss(*prepare(out[0] if isinstance(out, tuple) else out, batch, task)).backward()
        optimizer.step()

    times: dict[str, list[float]] = {v: [] for v in runs}
    for _ in range(args.rounds):
        for variant, (model, optimizer, task_loss) in runs.items():
            step(model, optimizer, task_loss, batches[0])  # warm: the first step after a switch pays for the other's
            start = time.process_time()
            for batch in batches:
                step(model, optimizer, task_loss, batch)
            times[variant].append((time.process_time() - start) / len(batches) * 1e3)
    base = statistics.median(times[args.variant[0]])
    for variant, ms in times.items():
        print(f"{args.recipe} [{variant}] CPU ms/step {', '.join(f'{t:.1f}' for t in ms)}; "
              f"median {statistics.median(ms):.1f}, ratio to the first {statistics.median(ms) / base:.3f}")


if __name__ == "__main__":
    main()
