r"""Recipes: one YAML file per model x dataset (``models/<model>-<dataset>[-<variant>].yaml``), read into typed
dataclasses.

A recipe has the sections ``data``, ``model`` (:class:`~gea_graph.models.ModelConfig`), ``optim``, ``trainer``,
for a recipe copying a paper's table ``paper``, and optionally ``sweep`` (the search space of ``gea-graph sweep``,
read by :mod:`gea_graph.sweep`; training ignores it). Loading is strict: an unknown key or a missing required key raises
:class:`RecipeError` naming the key and the file. Overrides such as ``model.hidden=64 trainer.max_epochs=5`` are
dotted paths whose values are parsed as YAML (so ``64`` is an int, ``1e-3`` a float, ``null`` is ``None``).
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from gea_graph import checks
from gea_graph.models.config import ModelConfig

RECIPE_DIR_ENV = "GEA_GRAPH_RECIPES"
#: Version of the recipe schema (the sections and keys below). A checkpoint records it: a change that makes old
#: recipes mean something else, or fail to load, raises it.
RECIPE_SCHEMA_VERSION = 1
#: The metrics a recipe may give as ``trainer.metric`` -> True when higher is better
#: (:func:`gea_graph.train.metrics.make_metric`).
HIGHER_IS_BETTER = {"mae": False, "accuracy": True, "ap": True, "f1": True, "mrr": True}
#: The losses a recipe may give as ``trainer.loss`` (:func:`gea_graph.train.metrics.loss_fn`).
LOSSES = ("l1", "mse", "ce", "wce", "bce", "rank")
#: Lightning's precision names a recipe may give (besides ``auto``).
PRECISIONS = ("auto", "32-true", "32", "64-true", "64", "16-mixed", "16", "bf16-mixed", "bf16", "16-true",
              "bf16-true", "transformer-engine")


class RecipeError(ValueError):
    r"""A recipe file or override that cannot be used as it is (the message names the key and the file)."""


#: The range of every numeric recipe key (``(low, high)`` inclusive; with ``"open"``: exclusive; ``"fraction"``:
#: [0, 1)), checked when a recipe is read (:func:`check_ranges`); list values are checked item by item, ``None``
#: (where allowed) is not checked. ``tests/train/test_recipe_values.py`` keeps every numeric key of the sections
#: in this table.
RANGES: dict[str, tuple[float, float] | tuple[float, float, str] | str] = {
    "data.subset": (1, checks.MAX_COUNT), "data.split_seed": (0, checks.MAX_SEED),
    "optim.lr": (0, 10, "open"), "optim.weight_decay": (0, 10), "optim.betas": "fraction",
    "optim.eps": (0, 1, "open"), "optim.warmup_epochs": (0, 10 ** 6), "optim.warmup_steps": (0, 10 ** 9),
    "optim.end_lr": (0, 10), "optim.power": (0, 100, "open"), "optim.factor": (0, 1, "open"),
    "optim.patience": (0, 10 ** 6), "optim.min_lr": (0, 10), "optim.clip": (0, 10 ** 6, "open"),
    "trainer.max_epochs": (1, 10 ** 6), "trainer.batch_size": (1, 2 ** 20), "trainer.eval_batch_size": (1, 2 ** 20),
    "trainer.seeds": (0, checks.MAX_SEED), "trainer.max_time": (0, checks.MAX_MINUTES, "open"),
    "trainer.num_workers": (0, 1024), "trainer.log_every_n_steps": (1, 10 ** 9),
    "trainer.release_memory_every": (1, 10 ** 9), "trainer.release_memory_above": (1, 2 ** 30),
    "model.out_channels": (1, 2 ** 20), "model.hidden": (1, 2 ** 16), "model.layers": (1, 1000),
    "model.node_in": (1, 2 ** 20), "model.node_vocab": (0, 2 ** 24), "model.edge_in": (0, 2 ** 20),
    "model.edge_vocab": (0, 2 ** 24), "model.heads": (1, 1024), "model.gea_heads": (1, 1024),
    "model.units": (1, 2 ** 16), "model.dropout": "fraction", "model.attn_dropout": "fraction",
    "model.head_layers": (1, 100), "model.head_dropout": "fraction", "model.aux_weight": (0, 10 ** 6),
    "model.pe.size": (1, 256), "model.pe.dim": (1, 2 ** 16), "model.pe.layers": (1, 100),
    "model.graphormer.max_degree": (1, 2 ** 16), "model.graphormer.max_distance": (1, 254),
    "model.graphormer.max_hops": (0, 254), "model.graphormer.ffn_channels": (1, 2 ** 20),
    "model.graphormer.gfsa_k": (1, 100),
    "paper.value": (-10 ** 12, 10 ** 12), "paper.std": (0, 10 ** 12), "paper.params": (1, 10 ** 12),
    "paper.params_rtol": (0, 1),
}


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def check_ranges(recipe: Recipe) -> None:
    r"""Checks every key of :data:`RANGES` that the recipe sets (raises :class:`~gea_graph.checks.BadValue` naming
    the key, the value and its range). :func:`build_dataclass` checks each section's keys before the section is
    built, so that a range is reported before any check that combines keys."""
    for key in RANGES:
        check_range(key, _get(recipe, key))


def check_range(key: str, value: Any) -> None:
    r"""Checks :obj:`value` (a list: each item) against ``RANGES[key]``; ``None`` and keys without a range pass."""
    spec = RANGES.get(key)
    if spec is None:
        return
    for item in value if isinstance(value, list) else [] if value is None else [value]:
        if spec == "fraction":
            checks.fraction(item, key)
        elif isinstance(item, int) and not isinstance(item, bool) and len(spec) == 2:
            checks.integer(item, key, spec[0], spec[1])
        else:
            checks.number(item, key, spec[0], spec[1], strict_low=len(spec) == 3, strict_high=len(spec) == 3)


def pe_items(spec: str | None) -> dict[str, int]:
    r"""``"lap:8,rw:20"`` -> ``{"lap": 8, "rw": 20}`` (the spec is checked by
    :func:`gea_graph.transforms.parse_pe` when the data is built)."""
    items = {}
    for item in (spec or "").split(","):
        kind, _, rest = item.strip().partition(":")
        size = rest.split(":")[0]  # options (``lap:10:norm=none``) follow the size
        if kind and size.isdigit():
            items[kind] = int(size)
    return items


@dataclass
class DataConfig:
    r"""Where the graphs come from. Exactly one of :obj:`name` (a built-in dataset of
    :func:`gea_graph.data.get_dataset`), :obj:`csv` (a user's molecule CSV, read by
    :class:`gea_graph.data.MoleculeCSV`) or :obj:`cls` (an importable PyG dataset class, ``"package.module.Class"``).

    Args:
        name: Built-in dataset name (``zinc``, ``peptides-func``, ``tree-r3``, ...).
        csv: Path of a molecule CSV (relative paths are read from the working directory).
        cls: Dotted path of a dataset class (a subclass of :class:`torch_geometric.data.Dataset`, checked before
            it is called; its files are read with every ``torch.load`` weights-only); called as
            ``cls(root=..., split=..., **options)`` when it takes a ``split`` argument, else as
            ``cls(root=..., **options)`` (or without ``root`` if it takes none) and split at random 80/10/10 (seeded
            by :obj:`split_seed`). A recipe is trusted input all the same: it chooses files and classes to import.
        options: Extra keyword arguments of the dataset.
        root: Data root (``None``: ``$GEA_GRAPH_DATA`` or ``./datasets``).
        pe: Positional encodings computed once and cached (e.g. ``"rw:20"``, ``"lap:10"``, ``"spd:20"``; options
            as ``"lap:10:norm=none:trivial=keep:pad=nan"`` or ``"spd:20:paths=5"``, see
            :func:`gea_graph.transforms.parse_pe`).
        subset: Use only the first ``subset`` graphs of each split (quick runs; at least 1).
        split_seed: Seed of the random split of a class without splits.
        on_device: Keep each split in device memory and gather its batches there
            (:class:`~gea_graph.data.device.DeviceSplit`: no per-step collation or copy to the device): ``auto`` (on
            a GPU, for a split that takes under :data:`~gea_graph.data.device.ON_DEVICE_SHARE` of the free device
            memory; never on a CPU, where the host loader is the reference), ``true`` (always, on any device) or
            ``false``. The batches are the same either way.
    """

    name: str | None = None
    csv: str | None = None
    cls: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    root: str | None = None
    pe: str | None = None
    subset: int | None = None
    split_seed: int = 0
    on_device: bool | str = "auto"

    def __post_init__(self) -> None:
        if self.on_device != "auto" and type(self.on_device) is not bool:
            raise ValueError(f"data.on_device: {self.on_device!r} must be auto, true or false")
        for key in ("name", "csv", "cls", "root"):  # "" would be the working directory
            if getattr(self, key) is not None:
                checks.text(getattr(self, key), f"data.{key}")
        given = [k for k in ("name", "csv", "cls") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("data: give exactly one of 'name', 'csv' or 'cls'"
                             + (f" (got {', '.join(given)})" if given else ""))
        if self.name is not None:
            from gea_graph.data import DATASETS

            if self.name.lower() not in DATASETS:
                raise ValueError(f"data.name: {self.name!r} is not a built-in dataset; allowed: "
                                 f"{', '.join(DATASETS)} (or data.csv / data.cls for your own)")
        if self.pe is not None:
            from gea_graph.transforms import parse_pe

            parse_pe(self.pe)

    @property
    def label(self) -> str:
        r"""Short name of the dataset for result tables."""
        if self.name is not None:
            return self.name
        if self.csv is not None:
            return Path(self.csv).stem
        return str(self.cls).rsplit(".", 1)[-1]


@dataclass
class OptimConfig:
    r"""The optimiser and the learning-rate schedule.

    Args:
        optimizer: ``"adamw"`` (decoupled weight decay; the papers' recipes) or ``"adam"`` (weight decay as an L2
            term in the gradient, as ``torch.optim.Adam``; PyG's examples).
        lr: Peak learning rate.
        weight_decay: Weight decay.
        betas: Adam betas.
        eps: Adam epsilon.
        schedule: ``"cosine"`` (linear warm-up over :obj:`warmup_epochs`, then half a cosine to 0 at the last
            epoch; stepped per epoch, as GraphGPS/GEAET), ``"polynomial"`` (linear warm-up over :obj:`warmup_steps`,
            then polynomial decay of power :obj:`power` to :obj:`end_lr` at the last step; stepped per step, as
            Graphormer), ``"plateau"`` (``ReduceLROnPlateau`` on the validation metric: the rate times
            :obj:`factor` after :obj:`patience` epochs without improvement, never below :obj:`min_lr`; as PyG's
            ``examples/graph_gps.py``) or ``"constant"``.
        horizon: What the cosine schedule runs over: ``"epochs"`` (warm-up, then half a cosine to 0 at
            ``trainer.max_epochs``, stepped per epoch) or ``"time"`` (half a cosine from the peak to 0 over the run's
            wall-clock cap, ``trainer.max_time`` or ``--max-time``, stepped per step: the rate at a step is
            :math:`\frac{1}{2}(1 + \cos(\pi f))` times the peak, :math:`f` the larger of the shares of the
            cap's training seconds and of ``trainer.max_epochs``'s steps used so far; for fixed-time budgets,
            where the epochs that fit depend on the machine; no warm-up).
        warmup_epochs: Warm-up length of the cosine schedule.
        warmup_steps: Warm-up length of the polynomial schedule.
        end_lr: Final learning rate of the polynomial schedule.
        power: Power of the polynomial decay (1: linear).
        factor: Factor of the plateau schedule.
        patience: Epochs without improvement before the plateau schedule lowers the rate.
        min_lr: Lower bound of the plateau schedule.
        clip: Gradient-norm clipping (``None``: off).
    """

    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    schedule: str = "cosine"
    horizon: str = "epochs"
    warmup_epochs: int = 0
    warmup_steps: int = 0
    end_lr: float = 1e-9
    power: float = 1.0
    factor: float = 0.5
    patience: int = 10
    min_lr: float = 0.0
    clip: float | None = 1.0

    def __post_init__(self) -> None:
        if self.optimizer not in ("adamw", "adam"):
            raise ValueError(f"optim.optimizer: {self.optimizer!r} is not one of adamw, adam")
        if self.schedule not in ("cosine", "polynomial", "plateau", "constant"):
            raise ValueError(f"optim.schedule: {self.schedule!r} is not one of cosine, polynomial, plateau, constant")
        if self.horizon not in ("epochs", "time"):
            raise ValueError(f"optim.horizon: {self.horizon!r} is not one of epochs, time")
        if self.horizon == "time" and (self.schedule != "cosine" or self.warmup_epochs):
            raise ValueError("optim.horizon: time is a cosine without warm-up (schedule: cosine, warmup_epochs: 0); "
                             f"got schedule {self.schedule!r}, warmup_epochs {self.warmup_epochs}")
        if len(self.betas) != 2:
            raise ValueError(f"optim.betas: {self.betas!r} is not allowed; it must be two numbers in [0, 1)")


@dataclass
class TrainerConfig:
    r"""Training loop settings.

    Args:
        max_epochs: Epochs.
        batch_size: Training batch size: the global batch, shared out among the processes of a multi-device run
            (it must be a multiple of their number).
        eval_batch_size: Validation/test batch size (``None``: :obj:`batch_size`; also global).
        seeds: Seeds of a benchmark (``gea-graph train`` uses the first unless ``--seed`` is given).
        precision: Lightning precision (``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``) or ``"auto"``: float32 on
            every device (with TF32 matrix products on a GPU); bf16 or fp16 is opt-in.
        deterministic: Deterministic algorithms only (``torch.use_deterministic_algorithms``): a resumed or repeated
            GPU run then gives the same numbers (without it, GPU runs are statistically equivalent: float atomics in
            scatter sums vary from run to run). Slower on a GPU; CPU runs are deterministic either way.
        max_time: Wall-clock cap of a run in minutes (``None``: none).
        num_workers: Data-loader workers per loader (``None``: 2 on a GPU, 0 on a CPU; see
            :func:`gea_graph.train.policy.default_workers`).
        loss: ``"auto"`` (by task: L1 for regression, cross-entropy for classes, BCE for multi-label, a softmax over
            candidates for link ranking), or ``"l1"``, ``"mse"``, ``"ce"``, ``"wce"`` (class-balanced cross-entropy,
            LRGB's VOC/COCO setting), ``"bce"``.
        metric: ``"auto"`` (by task: MAE, accuracy, AP, macro-F1 for node classification, MRR) or one of
            ``"mae"``, ``"accuracy"``, ``"ap"``, ``"f1"``, ``"mrr"``.
        log_every_n_steps: Lightning's logging interval.
        compile: Train the model compiled (``torch.compile``, no graph break; the same function as in eager mode):
            ``default`` (or ``true``: the ``inductor`` backend), ``reduce-overhead`` (inductor with CUDA graphs: the
            whole step, evaluation included, replayed as one graph per fixed batch shape; on a CPU, inductor), or
            the name of a :func:`torch.compile` backend (e.g. ``aot_eager``, which needs no C++ compiler). Without
            fixed-size batches the model compiles with dynamic shapes: a few graphs a run, not one per batch size
            (training and evaluation apart; torch specialises a size of 1, e.g. a batch of one graph).
        fixed_size: Pad every batch to one of a few shapes planned once per split
            (:mod:`gea_graph.train.fixed_size`; padding changes no result): ``auto`` (where the step is compiled
            with ``reduce-overhead``), ``true`` or ``false``.
        eval_train: After training, also evaluate the selected (best-validation) checkpoint on the training split,
            in eval mode, and write the metric to ``result.json`` as ``train``: what the bottleneck benchmark
            (TreeNeighbourMatch, Alon & Yahav 2021) reports, as a model's ability to fit the training set. One more
            pass over the training set, so off by default; it changes neither the model nor its training.
        release_memory_every: Training steps between two hand-backs of the free C heap to the system
            (:class:`~gea_graph.train.memory.ReleaseFreeHeap`; also done around each evaluation; ``None``: none by
            the step count). Fewer steps bound the resident memory of a CPU run more tightly at the cost of page
            faults in the steps that follow.
        release_memory_above: Resident set size in MiB above which a training step's end hands the free heap back
            (``None``: no bound): the memory bound of a CPU run, paying only for the releases it needs, since each
            release costs page faults in the steps after it (``docs/performance.md``, "Memory of a CPU run"). Linux
            only (elsewhere only the interval acts).

        Neither changes the model nor what it learns.
    """

    max_epochs: int = 100
    batch_size: int = 32
    eval_batch_size: int | None = None
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    precision: str = "auto"
    deterministic: bool = False
    max_time: float | None = None
    num_workers: int | None = None
    loss: str = "auto"
    metric: str = "auto"
    log_every_n_steps: int = 50
    compile: bool | str = False
    fixed_size: bool | str = "auto"
    eval_train: bool = False
    release_memory_every: int | None = 16  # gea_graph.train.memory.TRIM_EVERY (imports Lightning)
    release_memory_above: float | None = None

    def __post_init__(self) -> None:
        if self.compile == "default":
            self.compile = True
        if self.fixed_size != "auto" and type(self.fixed_size) is not bool:
            raise ValueError(f"trainer.fixed_size: {self.fixed_size!r} must be auto, true or false")
        if isinstance(self.compile, str) and self.compile != "reduce-overhead":
            import torch._dynamo

            backends = torch._dynamo.list_backends(exclude_tags=())
            if self.compile not in backends:
                raise ValueError(f"trainer.compile: {self.compile!r} is not a torch.compile backend; give default, "
                                 f"reduce-overhead, true, false or one of {', '.join(backends)}")
        elif self.compile != "reduce-overhead" and type(self.compile) is not bool:
            raise ValueError(f"trainer.compile: {self.compile!r} must be false, default, reduce-overhead, true or a "
                             f"torch.compile backend name")
        if not self.seeds:
            raise ValueError("trainer.seeds: [] is not allowed; give at least one seed")
        if self.precision not in PRECISIONS:
            raise ValueError(f"trainer.precision: {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        checks.choice(self.loss, "trainer.loss", ("auto", *LOSSES))
        checks.choice(self.metric, "trainer.metric", ("auto", *HIGHER_IS_BETTER))


@dataclass
class PaperConfig:
    r"""The published result a recipe copies.

    Args:
        source: Paper and table, e.g. ``"GEAET (Liang et al., 2024), Table 1"``.
        metric: Metric name as published (``"MAE"``, ``"AP"``, ...).
        value: Published mean (test) score.
        std: Published standard deviation.
        params: Published parameter count (the recipe's model must match it; see :obj:`params_rtol`).
        params_rtol: Relative tolerance of the count (``0``: exact; e.g. 0.05 for a paper that says "500K").
        extra: Further published metrics of the same row, ``name: [mean, std]``, named as the run's extra metrics
            (e.g. ``hits@1`` for PCQM-Contact, see :func:`gea_graph.train.metrics.make_metric`).
    """

    source: str
    metric: str
    value: float
    std: float | None = None
    params: int | None = None
    params_rtol: float = 0.0
    extra: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Recipe:
    r"""A complete experiment: data, model, optimiser, training loop (and the paper it copies, and the search space
    of ``gea-graph sweep``: ``sweep``, dotted keys to distributions, checked by :mod:`gea_graph.sweep.space`)."""

    data: DataConfig
    model: ModelConfig
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    paper: PaperConfig | None = None
    sweep: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        # Checks of model values whose layers would fail with an opaque error (ZeroDivisionError for heads=0, a
        # BatchNorm size mismatch for a PE the data does not provide); kept here, where the recipe is read.
        if self.name:
            checks.name(self.name, "name")
        check_ranges(self)
        m = self.model
        _check_model_names(m)
        data_pe = pe_items(self.data.pe)
        if m.pe is not None and data_pe.get(m.pe.kind) != m.pe.size:
            have = f"data.pe is {self.data.pe!r}" if self.data.pe else "data.pe is not set"
            raise ValueError(f"model.pe expects {m.pe.kind}:{m.pe.size} positional encodings but {have}; "
                             f"add {m.pe.kind}:{m.pe.size} to data.pe (or set model.pe.size to match)")
        if m.family == "graphormer":
            _check_graphormer_data(self.data.pe, m)
        if m.family == "pyg_gps" and self.trainer.compile:
            raise ValueError("trainer.compile: PyG's GPS example (family pyg_gps) cannot be compiled: its GPSConv "
                             "sizes the dense attention batch from the data (to_dense_batch), which torch.compile "
                             "cannot trace as one graph; train it with trainer.compile=false, as PyG's example does")

    def to_dict(self) -> dict[str, Any]:
        r"""Plain-type dictionary (YAML/JSON/``weights_only`` checkpoint safe)."""
        return dataclasses.asdict(self)


def _check_model_names(model: ModelConfig) -> None:
    # names the layers resolve only when the model is built (after the data): checked here, where the recipe is read
    from torch_geometric.nn.resolver import activation_resolver

    from gea_graph.nn.geanet import resolve_norm

    checks.choice(model.norm_scope, "model.norm_scope", ("graph", "batch"))
    if model.pe is not None:
        checks.choice(model.pe.kind, "model.pe.kind", ("lap", "rw"))
        checks.choice(model.pe.encoder, "model.pe.encoder", ("linear", "deepset"))
    try:
        activation_resolver(model.act)
    except (ValueError, TypeError):
        raise checks.bad("model.act", model.act, "an activation such as relu, gelu, silu", why="is not known") \
            from None
    try:
        resolve_norm(model.norm, 8)
    except (ValueError, TypeError, KeyError):
        raise checks.bad("model.norm", model.norm, "batch_norm, layer_norm, graph_layer_norm, none, or a PyG "
                         "normalisation such as graph_norm", why="is not known") from None


def _check_graphormer_data(pe: str | None, model: ModelConfig) -> None:
    # A Graphormer reads the data's spd fields: a different distance cap or fewer path edges than the model
    # reads would silently change its encodings, so the recipe is refused before any data is built.
    from gea_graph.transforms import ShortestPathDistance, parse_pe

    transform = parse_pe(pe)
    parts = getattr(transform, "transforms", [transform])
    spd = next((t for t in parts if isinstance(t, ShortestPathDistance)), None)
    g = model.graphormer
    if spd is None:
        if model.attn != "agf":  # AGF takes no structural bias
            raise RecipeError(f"model.family graphormer reads shortest paths: data.pe must contain "
                              f"'spd:{g.max_distance}' (got {pe!r})")
        return
    if spd.max_distance != g.max_distance:
        raise RecipeError(f"data.pe caps distances at {spd.max_distance} but model.graphormer.max_distance is "
                          f"{g.max_distance}; they must be equal")
    if g.max_hops > 0 and model.edge_encoder != "none" and spd.max_path < g.max_hops:
        raise RecipeError(f"data.pe keeps {spd.max_path} edges per shortest path but model.graphormer.max_hops is "
                          f"{g.max_hops}; keep at least {g.max_hops} path edges in data.pe "
                          "(its spd paths option) or lower "
                          f"max_hops")


# -- locating -------------------------------------------------------------------------------------------------------


def packaged_recipe_dir() -> Path:
    r"""The recipes that come with gea-graph: ``gea_graph/recipes`` in an installed wheel (``setup.py`` packs
    ``models/`` there), else the ``models/`` folder of the checkout holding this package (an editable install)."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "recipes"
    return installed if installed.is_dir() else package.parent / "models"


def recipe_dirs() -> list[Path]:
    r"""Folders searched for recipe names, first to last: ``$GEA_GRAPH_RECIPES`` (``os.pathsep``-separated),
    ``./models`` and :func:`packaged_recipe_dir`."""
    dirs = [Path(p) for p in os.environ.get(RECIPE_DIR_ENV, "").split(os.pathsep) if p]
    # each folder once: in a checkout ./models is the packaged folder
    return list(dict.fromkeys([*dirs, Path.cwd() / "models", packaged_recipe_dir()]))


def resolve_recipe(spec: str | os.PathLike) -> Path:
    r"""A recipe path from a path or a name (``geaet-zinc-quick`` -> ``models/geaet-zinc-quick.yaml``)."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.parent != Path("."):
        if not path.is_file():
            raise RecipeError(f"recipe file {str(path)!r} does not exist")
        return path
    for folder in recipe_dirs():
        for suffix in (".yaml", ".yml"):
            candidate = folder / f"{spec}{suffix}"
            if candidate.is_file():
                return candidate
    folders = ", ".join(str(d) for d in recipe_dirs())
    close = difflib.get_close_matches(str(spec), available_recipes(), n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise RecipeError(f"no recipe named {str(spec)!r} in {folders}{hint}")


def recipe_source(path: str | os.PathLike) -> str:
    r"""The resolved recipe file, and the packaged recipe of the same name it shadows (a ``./models`` folder or
    ``$GEA_GRAPH_RECIPES`` comes first), for the user to see which file runs. Recipes are trusted input: a recipe
    from someone else chooses data files and dataset classes, so read it before running it."""
    path = Path(path).resolve()
    packaged = (packaged_recipe_dir() / path.name).resolve()
    shadow = f" (shadows the packaged {packaged})" if packaged.is_file() and packaged != path else ""
    return f"{path}{shadow}"


def available_recipes() -> list[str]:
    r"""Names of the recipes found in :func:`recipe_dirs`."""
    names = set()
    for folder in recipe_dirs():
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.yaml"))
    return sorted(names)


# -- parsing --------------------------------------------------------------------------------------------------------


class RecipeLoader(yaml.SafeLoader):
    r"""YAML for recipes: :class:`yaml.SafeLoader` that refuses anchors and aliases (``&a`` / ``*a``: nine nested
    aliases in a 1.5 KB file expand to gigabytes) and every tag (``!!python/...``, ``!!binary``, ``!custom``); a
    recipe is plain mappings, lists and scalars."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(None, None, "anchors and aliases (&name, *name) are not allowed in a "
                                              "recipe; write the values out", event.start_mark)
        if getattr(event, "tag", None) is not None:
            raise yaml.composer.ComposerError(None, None, f"the tag {event.tag!r} is not allowed in a recipe; give "
                                              "plain values", event.start_mark)
        return super().compose_node(parent, index)


def load_yaml(text: str, source: str) -> Any:
    r"""The plain data of a recipe's YAML text (:class:`RecipeLoader`); :class:`RecipeError` naming :obj:`source`
    and the line when it is not valid or uses anchors, aliases or tags."""
    try:
        return yaml.load(text, Loader=RecipeLoader)
    except yaml.YAMLError as err:
        raise RecipeError(f"{source}: not a valid recipe: {' '.join(str(err).split())}") from None


def parse_override(text: str) -> tuple[list[str], Any]:
    r"""``"model.hidden=64"`` -> ``(["model", "hidden"], 64)`` (the value parsed as YAML)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise RecipeError(f"override {text!r} is not of the form section.key=value")
    return key.strip().split("."), load_yaml(value, f"override {text!r}") if value.strip() else None


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    r"""Sets each dotted override in the raw recipe dictionary (in place; returns it)."""
    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for key in keys[:-1]:
            if node.get(key) is None:
                node[key] = {}
            node = node[key]
            if not isinstance(node, dict):
                raise RecipeError(f"override {text!r}: {key!r} is not a section")
        node[keys[-1]] = value
    return raw


def _is_optional(tp: Any) -> tuple[bool, Any]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return True, args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
    return False, tp


def _convert(tp: Any, value: Any, where: str, source: str) -> Any:
    optional, inner = _is_optional(tp)
    if value is None:
        if optional:
            return None
        raise RecipeError(f"{source}: key '{where}' must not be null")
    if dataclasses.is_dataclass(inner):
        return build_dataclass(inner, value, where, source)
    origin = typing.get_origin(inner)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise RecipeError(f"{source}: key '{where}' must be a list, got {value!r}")
        (item,) = typing.get_args(inner) or (Any,)
        return [_convert(item, v, f"{where}[{i}]", source) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"{source}: key '{where}' must be a mapping, got {value!r}")
        return dict(value)
    if inner is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if inner is float and isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads "1e-3" as a string
        except ValueError:
            pass
    if inner in (int, str, bool, float) and not (isinstance(value, inner)
                                                 and not (inner is int and isinstance(value, bool))):
        raise RecipeError(f"{source}: key '{where}' must be {inner.__name__}, got {value!r}")
    return value


def build_dataclass(cls: type, raw: Any, where: str, source: str) -> Any:
    r"""Builds dataclass ``cls`` from a mapping, strictly: unknown keys, missing required keys, wrong types and
    invalid values raise :class:`RecipeError` naming ``where.key`` and ``source``."""
    prefix = f"{where}." if where else ""
    if not isinstance(raw, dict):
        raise RecipeError(f"{source}: section '{where or '<top>'}' must be a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in raw if k not in fields]
    if unknown:
        raise RecipeError(f"{source}: unknown key '{prefix}{unknown[0]}' (allowed: {', '.join(fields)})")
    missing = [name for name, f in fields.items() if name not in raw and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise RecipeError(f"{source}: missing required key '{prefix}{missing[0]}'")
    values = {k: _convert(hints[k], v, f"{prefix}{k}", source) for k, v in raw.items()}
    try:
        for key, value in values.items():
            check_range(f"{prefix}{key}", value)
        return cls(**values)
    except (TypeError, ValueError) as err:
        raise RecipeError(f"{source}: {err}") from None


def recipe_from_dict(raw: dict[str, Any], source: str = "<recipe>", name: str = "") -> Recipe:
    r"""A :class:`Recipe` from a raw dictionary (strict; see :func:`build_dataclass`)."""
    raw = dict(raw)
    raw.setdefault("name", name)
    return build_dataclass(Recipe, raw, "", source)


def read_recipe(spec: str | os.PathLike, overrides: Sequence[str] = ()) -> tuple[Path, dict[str, Any]]:
    r"""The file of a recipe (by name or path) and its plain data with dotted overrides applied, not yet checked:
    what :func:`load_recipe` builds a :class:`Recipe` from."""
    path = resolve_recipe(spec)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise RecipeError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    raw = load_yaml(text, str(path)) or {}
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: a recipe must be a mapping of sections")
    return path, apply_overrides(raw, overrides)


def trainer_value(raw: dict[str, Any], key: str) -> Any:
    r"""``trainer.<key>`` of a recipe's plain data (:func:`read_recipe`), else :class:`TrainerConfig`'s default: read
    without building the recipe, whose checks import torch and PyG (``gea-graph bench --list-suites``)."""
    trainer = raw.get("trainer") or {}
    if key in trainer:
        return trainer[key]
    default = {f.name: f for f in dataclasses.fields(TrainerConfig)}[key]
    return default.default_factory() if default.default is dataclasses.MISSING else default.default


def load_recipe(spec: str | os.PathLike, overrides: Sequence[str] = ()) -> Recipe:
    r"""Reads a recipe by name or path and applies dotted overrides."""
    path, raw = read_recipe(spec, overrides)
    recipe = recipe_from_dict(raw, str(path), path.stem)
    if not recipe.name:
        try:
            recipe.name = checks.name(path.stem, "name")
        except checks.BadValue as err:
            raise RecipeError(f"{path}: {err} (taken from the file name; give the recipe a name: key)") from None
    return recipe


def dump_recipe(recipe: Recipe, path: str | os.PathLike) -> None:
    r"""Writes the resolved recipe as YAML (atomically)."""
    from gea_graph.io import write_text

    write_text(path, yaml.safe_dump(recipe.to_dict(), sort_keys=False))
