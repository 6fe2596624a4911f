"""Training steps with PyTorch's fused Adam(W) against its default implementation (what training uses).

    GEA_GRAPH_MIRROR=../shared/data python scripts/fused_optimizer_ab.py [--recipes R ...] [--repeats 30] [--threads 1]

On CPU, PyTorch's default Adam/AdamW is a Python loop of about ten operators per parameter tensor; the fused
implementation makes the same update (to float rounding, ``tests/train/test_optimizer.py``) in one kernel per step
(:func:`gea_graph.train.module.build_optimizer`). For each recipe: one batch
(:func:`gea_graph.bench.perf.training.recipe_batch`: ZINC recipes, the first ``trainer.batch_size`` graphs of the ZINC
training split; Peptides-func recipes, the 128 graphs of ``peptides_batch``) and two models with the same initial
weights, one per optimiser; the two steps (forward, loss, backward, optimiser step) alternate in one process (order
flipped every repeat) after one warm-up step each. Prints the median step of each, their ratio and the parameter
tensors the optimiser updates. Used for docs/performance.md, "Fused Adam(W)".
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

from gea_graph.bench.perf.training import (
    _training_step,
    ab_arguments,
    interleaved_medians,
    recipe_batch,
)
from gea_graph.models import build_model
from gea_graph.train.recipe import load_recipe

RECIPES = ("gcn-zinc-cpu", "gcn-geanet-zinc-cpu", "gin-zinc-cpu", "gin-geanet-zinc-cpu", "gatedgcn-zinc-cpu",
           "gatedgcn-geanet-zinc-cpu", "gps-zinc-cpu", "geaet-zinc-cpu", "gcn-peptides-func-cpu",
           "gcn-geanet-peptides-func-cpu")


def _medians(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    # interleaved_medians swaps what one step callable runs: here, the step of the form put in place.
    current = [next(iter(steps.values()))]
    forms = {form: partial(current.__setitem__, 0, step) for form, step in steps.items()}
    return interleaved_medians(lambda: current[0](), forms, repeats)


def main() -> None:
    args = ab_arguments(__doc__.split("\n\n")[0], RECIPES, 30)
    for name in args.recipes:
        batch, note = recipe_batch(name)
        ms = _medians({"fused": _training_step(name, batch, fused=True), "loop": _training_step(name, batch)},
                      args.repeats)
        fused, loop = ms["fused"] * 1e3, ms["loop"] * 1e3
        tensors = len(list(build_model(load_recipe(name).model).parameters()))
        print(f"{name}: fused {fused:.2f} ms, loop {loop:.2f} ms a step, ratio {fused / loop:.3f} ({tensors} "
              f"parameter tensors; {batch.num_graphs} graphs, {batch.num_nodes} nodes, {args.threads} thread(s), "
              f"median of {args.repeats}{'; ' + note if note else ''})")


if __name__ == "__main__":
    main()
