"""What a training run's first evaluation adds to the resident set, by mapping (file, heap or anonymous memory).

    GEA_GRAPH_MIRROR=../shared/data python scripts/rss_by_file.py RECIPE [KEY=VALUE ...] [--rows 8] [--threads 1]

Trains ``RECIPE`` (seed 0, ``KEY=VALUE`` recipe overrides, e.g. ``data.subset=1024`` to reach the evaluation sooner)
into a temporary folder with ``THP_MEM_ALLOC_ENABLE=1`` as the ``gea-graph`` command sets it, reads
``/proc/self/smaps`` when the first validation starts and when it ends, stops the run there, and prints the mappings
whose resident pages grew the most (MiB, summed over the mappings of each file). Used for "Memory of a Peptides-func
run" in docs/performance.md: there, each split's store mapped the dataset's files again.
"""
from __future__ import annotations

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before torch is imported, as the gea-graph command does

import argparse
import collections
import tempfile
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from gea_graph.train.recipe import load_recipe
from gea_graph.train.run import fit


def resident_by_mapping() -> collections.Counter:
    """Resident KiB of this process by mapped file (``[heap]``, ``[anon]`` for anonymous memory)."""
    out: collections.Counter = collections.Counter()
    name = "[anon]"
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:  # a mapping's header line
                name = parts[5] if len(parts) >= 6 else "[anon]"
            elif parts and parts[0] == "Rss:":
                out[name] += int(parts[1])
    return out


class FirstEvaluation(Callback):
    """Reads the resident set by mapping around the first validation, then stops the run."""

    def __init__(self) -> None:
        self.before: collections.Counter | None = None
        self.growth: dict[str, float] = {}

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self.before = resident_by_mapping()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        after = resident_by_mapping()
        self.growth = {k: (after[k] - self.before.get(k, 0)) / 1024 for k in after}
        trainer.should_stop = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe, ["trainer.max_epochs=1", *args.overrides])
    trace = FirstEvaluation()
    with tempfile.TemporaryDirectory(prefix="rss-by-file-") as out:
        fit(recipe, out, seed=0, progress=False, callbacks=[trace], verbose=False, accelerator="cpu", devices=1)
    print(f"{args.recipe} {' '.join(args.overrides)}: resident MiB added by the first evaluation, by mapping")
    for name, mib in sorted(trace.growth.items(), key=lambda kv: -kv[1])[:args.rows]:
        print(f"{mib:9.1f}  {os.path.basename(name) if name.startswith('/') else name}")


if __name__ == "__main__":
    main()
