"""The resident set of a CPU training run after every training step, for a run of a few minutes.

    GEA_GRAPH_MIRROR=../shared/data python scripts/rss_trace.py RECIPE [--minutes 3] [--threads 1] [--out DIR] \
        [KEY=VALUE ...]
    GEA_GRAPH_MIRROR=../shared/data python scripts/rss_trace.py RECIPE [KEY=VALUE ...] --first-evaluation [--rows 8]

Trains ``RECIPE`` (one epoch at most, capped at ``--minutes``, seed 0; ``KEY=VALUE`` recipe overrides, e.g.
``trainer.release_memory_every=1``) into ``--out`` (default: a fresh temporary folder, removed afterwards) with
``THP_MEM_ALLOC_ENABLE=1`` as the ``gea-graph`` command sets it, and prints the steps trained, the resident set after
each step (MiB, ``/proc/self/statm``, read after the run's own callbacks, so after a release of the free heap when
one was due) and the process's peak (``VmHWM``, :func:`gea_graph.train.memory.peak_resident_mib`).

With ``--first-evaluation`` it instead reads ``/proc/self/smaps`` when the first validation starts and when it ends,
stops the run there, and prints the ``--rows`` mappings whose resident pages grew the most (MiB, summed over the
mappings of each file; ``[heap]``, ``[anon]``): what the first evaluation added to the resident set, by file. Used for
"Memory of a Peptides-func run" in docs/performance.md (there, each split's store mapped the dataset's files again).
"""
from __future__ import annotations

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before torch is imported, as the gea-graph command does

import argparse
import collections
import contextlib
import tempfile
import time
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from gea_graph.train.memory import peak_resident_mib, resident_mib
from gea_graph.train.recipe import load_recipe
from gea_graph.train.run import fit


class ResidentTrace(Callback):
    """The resident set (MiB) after every training step."""

    def __init__(self) -> None:
        self.resident: list[float] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.resident.append(resident_mib())


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
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--first-evaluation", action="store_true",
                        help="the resident pages the first evaluation adds, by mapping, then stop")
    parser.add_argument("--rows", type=int, default=8, help="mappings to print with --first-evaluation")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe, [f"trainer.max_time={args.minutes}", "trainer.max_epochs=1", *args.overrides])
    trace = FirstEvaluation() if args.first_evaluation else ResidentTrace()
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        out = args.out or stack.enter_context(tempfile.TemporaryDirectory(prefix="rss-trace-"))
        fit(recipe, out, seed=0, progress=False, callbacks=[trace], verbose=False, accelerator="cpu", devices=1)
    if isinstance(trace, FirstEvaluation):
        print(f"{args.recipe} {' '.join(args.overrides)}: resident MiB added by the first evaluation, by mapping")
        for name, mib in sorted(trace.growth.items(), key=lambda kv: -kv[1])[:args.rows]:
            print(f"{mib:9.1f}  {os.path.basename(name) if name.startswith('/') else name}")
        return
    peak = peak_resident_mib()
    print(f"{args.recipe} {' '.join(args.overrides)}: {len(trace.resident)} steps in {time.perf_counter() - start:.0f} s, "
          f"peak {peak:.0f} MiB (VmHWM)")
    print("resident MiB after each step:", " ".join(f"{r:.0f}" for r in trace.resident))


if __name__ == "__main__":
    main()
