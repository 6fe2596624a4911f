r"""Named benchmark suites: ``gea-graph bench --suite NAME`` and ``gea-graph bench --list-suites``.

A suite is a fixed set of recipes run over seeds with one protocol (epochs from each recipe, or a wall-clock cap per
run), so a published table or a leaderboard is one command. :data:`SUITES` is the registry; add a suite with
:func:`register`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gea_graph.train.recipe import read_recipe, trainer_value


@dataclass(frozen=True)
class Suite:
    r"""One benchmark suite.

    Args:
        name: What ``--suite`` takes.
        description: One line: which table or leaderboard it reproduces.
        recipes: Recipe names (files in ``models/``), in table order.
        seeds: Seeds of every run (``None``: each recipe's own ``trainer.seeds``).
        max_time: Wall-clock cap of each run in minutes (``None``: the recipe's epochs decide).
        overrides: ``KEY=VALUE`` overrides applied to every recipe of the suite (before the user's own).
        recipe_overrides: ``(recipe, overrides)`` pairs: overrides of single recipes, applied before
            :attr:`overrides` (e.g. a smaller training set for the deepest trees of a time-capped sweep).
        plot: Extra plot of the suite: ``"depth"`` (test, and train where measured, accuracy against tree depth,
            GEAET Fig. 7) or ``None``.
        jobs: Runs that train at the same time (``gea-graph bench --jobs`` overrides it).
        threads: Torch threads of each run (``None``: torch's default; ``--threads`` overrides it).
    """

    name: str
    description: str
    recipes: tuple[str, ...]
    seeds: tuple[int, ...] | None = None
    max_time: float | None = None
    overrides: tuple[str, ...] = field(default=())
    recipe_overrides: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())
    plot: str | None = None
    jobs: int = 1
    threads: int | None = None

    def size(self, seeds: Sequence[int] | None = None) -> tuple[int, int]:
        r"""``(runs, epochs)``: the number of recipe x seed runs and the epochs they train in total (each recipe's
        ``trainer.max_epochs`` after the suite's overrides; a time-capped run may stop earlier)."""
        runs = epochs = 0
        for spec in self.recipes:
            raw = self._read(spec)
            n = len(seeds if seeds is not None else self._seeds(raw))
            runs += n
            epochs += n * trainer_value(raw, "max_epochs")
        return runs, epochs

    def seeds_of(self, recipe: str) -> tuple[int, ...]:
        r"""The seeds the suite runs ``recipe`` with: the suite's, else the recipe's own ``trainer.seeds``."""
        return self._seeds(self._read(recipe))

    def _seeds(self, raw: dict[str, Any]) -> tuple[int, ...]:
        return self.seeds if self.seeds is not None else tuple(trainer_value(raw, "seeds"))

    def _read(self, recipe: str) -> dict[str, Any]:
        # the recipe's plain data, the suite's overrides applied: a listing reads values without building recipes
        return read_recipe(recipe, self.overrides_of(recipe))[1]

    def overrides_of(self, recipe: str) -> tuple[str, ...]:
        r"""The suite's overrides of ``recipe``: its own (:attr:`recipe_overrides`), then the suite's."""
        return (*dict(self.recipe_overrides).get(recipe, ()), *self.overrides)


SUITES: dict[str, Suite] = {}


def register(suite: Suite) -> Suite:
    r"""Adds ``suite`` to :data:`SUITES` (a name may be registered once)."""
    if suite.name in SUITES:
        raise ValueError(f"suite {suite.name!r} is already registered")
    SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> Suite:
    r"""The suite called ``name``; a ``KeyError`` naming the known suites otherwise."""
    try:
        return SUITES[name]
    except KeyError:
        raise KeyError(f"unknown suite {name!r}; known: {', '.join(sorted(SUITES))}") from None


def list_suites(seeds: Sequence[int] | None = None) -> str:
    r"""The text of ``gea-graph bench --list-suites``: one line per suite with its size."""
    lines = [f"{'suite':<28} {'runs':>5} {'epochs':>8} {'cap/run':>8} {'jobs':>4} {'at most':>8}  description"]
    for suite in SUITES.values():
        runs, epochs = suite.size(seeds)
        cap = f"{suite.max_time:g} min" if suite.max_time is not None else "-"
        # With a cap, the bench takes at most ceil(runs / jobs) caps (plus data preparation).
        most = f"{-(-runs // suite.jobs) * suite.max_time / 60:.1f} h" if suite.max_time is not None else "-"
        lines.append(f"{suite.name:<28} {runs:>5} {epochs:>8} {cap:>8} {suite.jobs:>4} {most:>8}  {suite.description}")
    return "\n".join(lines)


# -- the suites ------------------------------------------------------------------------------------------------------

TREE_MODELS = ("geaet", "gcn", "gine", "gin", "gatedgcn")
TREE_DEPTHS = (2, 3, 4, 5, 6, 7)

register(Suite(
    "tree-neighbours-match",
    "TreeNeighbourMatch accuracy vs depth, 5 models x r=2..7 (GEAET Fig. 7)",
    tuple(f"{m}-tree-r{d}" for m in TREE_MODELS for d in TREE_DEPTHS),
    plot="depth"))

# GEAET (Liang et al., 2024) and GFSA (Choi et al., 2024) tables; the recipes are written by
# scripts/make_paper_recipes.py (see its docstring for the rows that hand-written recipes cover).
MPNNS = ("gcn", "gine", "gatedgcn")
LRGB = ("pascalvoc-sp", "coco-sp", "peptides-struct", "peptides-func", "pcqm-contact")
PEPTIDES = ("peptides-struct", "peptides-func")
HEADS = (2, 3, 4, 6, 8)


def _mpnn_geanet(mpnn: str, dataset: str, pe: str) -> str:
    r"""The recipe of an MPNN + GEANet row (``pe``: ``nope``, ``lappe`` or ``rwpe``)."""
    if dataset.startswith("peptides") and mpnn == "gcn":
        return f"gcn-geanet-{dataset}-{'h4' if pe == 'lappe' else pe}"
    if dataset in ("coco-sp", "pcqm-contact") or (dataset.startswith("peptides") and pe == "lappe"):
        return f"{mpnn}-geanet-{dataset}"
    return f"{mpnn}-geanet-{dataset}-{pe}"


def _gcn_block(block: str, dataset: str, heads: int) -> str:
    if (block, heads) == ("geanet", 8):
        return "geaet-peptides-struct" if dataset == "peptides-struct" else "gcn-geanet-peptides-func"
    return f"gcn-{block}-{dataset}-h{heads}"


register(Suite(
    "geaet-table2",
    "GEAET Table 2: GCN/GINE/GatedGCN +/- GEANet, no PE; VOC, COCO, Peptides x2, PCQM-Contact",
    tuple(name for dataset in LRGB for mpnn in MPNNS
          for name in (f"{mpnn}-{dataset}", _mpnn_geanet(mpnn, dataset, "nope")))))
register(Suite(
    "geaet-table3-zinc",
    "GEAET Table 3, ZINC: GCN/GIN/GatedGCN +/- GEANet, no PE (28-atom-type encoding)",
    tuple(name for mpnn in ("gcn", "gin", "gatedgcn") for name in (f"{mpnn}-zinc", f"{mpnn}-geanet-zinc"))))
register(Suite(
    "geaet-table7",
    "GEAET Table 7: GCN+Transformer vs GCN+GEANet, 2/3/4/6/8 heads, LapPE, Peptides x2",
    tuple(_gcn_block(block, dataset, heads) for dataset in PEPTIDES for block in ("transformer", "geanet")
          for heads in HEADS)))
register(Suite(
    "geaet-table8",
    "GEAET Table 8: GCN+Transformer vs GCN+GEANet, no PE/RWPE/LapPE, 4 heads, Peptides x2",
    tuple(f"gcn-{block}-{dataset}-{pe}" for dataset in PEPTIDES for block in ("transformer", "geanet")
          for pe in ("nope", "rwpe", "h4"))))
register(Suite(
    "geaet-table9",
    "GEAET Table 9: PCQM-Contact Hits@1/3/10, MRR raw + filtered; 4 baselines and GEAET",
    tuple(f"{model}-pcqm-contact" for model in ("gatedgcn", "transformer", "gcn", "gine", "geaet"))))
register(Suite(
    "geaet-table10",
    "GEAET Table 10: GCN/GINE/GatedGCN, + GEANet x no PE/LapPE/RWPE; VOC, Peptides x2",
    tuple(name for dataset in ("pascalvoc-sp", *PEPTIDES) for mpnn in MPNNS
          for name in (f"{mpnn}-{dataset}", *(_mpnn_geanet(mpnn, dataset, pe) for pe in ("nope", "lappe", "rwpe"))))))
register(Suite(
    "gfsa-zinc",
    "GFSA Table 14: Graphormer vs Graphormer+GFSA on ZINC (GraphormerSLIM)",
    ("graphormer-zinc", "graphormer-gfsa-zinc")))
register(Suite(
    "gfsa-pcqm4m",
    "GFSA Table 15: Graphormer vs Graphormer+GFSA on PCQM4M (v1, OGB-LSC 2021; val MAE)",
    ("graphormer-pcqm4m", "graphormer-gfsa-pcqm4m")))
register(Suite(
    "gfsa-pcqm4mv2",
    "GFSA Table 15: Graphormer vs Graphormer+GFSA on PCQM4Mv2 (val MAE; 42.8M params, the paper 48.3M)",
    ("graphormer-pcqm4mv2", "graphormer-gfsa-pcqm4mv2")))

# -- CPU-budget leaderboards (docs/results.md): a fixed wall-clock budget per run, two runs at a time with one torch
# thread each, so that a 2-core machine runs them without oversubscription. Each run's test metric is read at its
# best validation epoch within the budget.

CPU_JOBS = 2
CPU_THREADS = 1

ZINC_CPU = (
    "geaet-zinc-cpu", "gps-zinc-cpu", "geaet-gfsa-zinc-cpu",
    "gatedgcn-geanet-zinc-cpu", "gatedgcn-zinc-cpu", "gcn-geanet-zinc-cpu", "gcn-zinc-cpu",
    "gin-geanet-zinc-cpu", "gin-zinc-cpu",
    "graphormer-zinc-cpu", "graphormer-gfsa-zinc-cpu", "graphormer-plaplacian-zinc-cpu", "graphormer-agf-zinc-cpu",
    "pyg-gps-zinc", "pyg-gine-zinc",
)

register(Suite(
    "zinc-cpu-10min",
    "ZINC leaderboard: every model family and PyG's GPS / GINE, 10 CPU minutes per run, 2 seeds",
    ZINC_CPU, seeds=(0, 1), max_time=10, jobs=CPU_JOBS, threads=CPU_THREADS))

register(Suite(
    "peptides-func-cpu-30min",
    "Peptides-func AP: GCN, GCN+GEANet, GEAET, 30 CPU minutes per run, 2 seeds",
    ("gcn-peptides-func-cpu", "gcn-geanet-peptides-func-cpu", "geaet-peptides-func-cpu"),
    seeds=(0, 1), max_time=30, jobs=CPU_JOBS, threads=CPU_THREADS))

CPU_TREE_DEPTHS = (2, 3, 4, 5, 6)
#: Training graphs (and test graphs) of the deepest trees in 7 CPU minutes: the full r = 5 and 6 sets (102,400 and
#: 204,800 training graphs of 63 and 127 nodes) would give GEAET less than one epoch (it fits 3 epochs of r = 4's
#: 51,200 graphs of 31 nodes); these subsets (random graphs: the splits are stored shuffled) hold about as many nodes
#: as r = 4's training set. The benchmark's question (does a model fit the training set?) stays the same.
CPU_TREE_SUBSETS = {5: 16384, 6: 8192}

# The tree recipes' epoch cosine (with 5 warm-up epochs) would still be warming up when 7 minutes end a deep tree's
# run; here it runs over the run's budget instead: the 7 minutes, or the recipe's epochs when those end it first.
register(Suite(
    "tree-depth-cpu",
    "TreeNeighbourMatch train and test accuracy vs depth, 5 models x r=2..6 (r=5, 6 on 16,384 / 8,192 graphs a "
    "split), 7 CPU minutes per run, 2 seeds (about 3 hours)",
    tuple(f"{m}-tree-r{d}" for m in TREE_MODELS for d in CPU_TREE_DEPTHS),
    seeds=(0, 1), max_time=7, overrides=("optim.horizon=time", "optim.warmup_epochs=0"),
    recipe_overrides=tuple((f"{m}-tree-r{d}", (f"data.subset={n}",)) for m in TREE_MODELS
                           for d, n in CPU_TREE_SUBSETS.items()),
    plot="depth", jobs=CPU_JOBS, threads=CPU_THREADS))
