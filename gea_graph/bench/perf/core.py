r"""What every row builder of the perf suite shares: the row type and its targets, the settings, the measurement
helpers (interleaved medians, peak memory; the method is described in :mod:`gea_graph.bench.perf`) and the report
writers. The rows are built by :mod:`~gea_graph.bench.perf.layers`, :mod:`~gea_graph.bench.perf.pipeline`,
:mod:`~gea_graph.bench.perf.throughput`, :mod:`~gea_graph.bench.perf.compiled` and :mod:`~gea_graph.bench.perf.scale`
and run by :mod:`~gea_graph.bench.perf.suite`.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.nn import Module

from gea_graph.io import ensure_folder, write_json, write_text

#: The keys of one object in ``perf.json`` (exactly these, in this order).
JSON_KEYS = ("name", "ours", "reference", "unit", "ratio", "target", "met")


@dataclass(frozen=True)
class Target:
    r"""A target on a row's ``ratio`` (or, for absolute rows, on ``ours``): ``op`` is ``"<="`` or
    ``">="``; ``on`` is ``"ratio"`` or ``"ours"``."""

    op: str
    value: float
    on: str = "ratio"

    def check(self, ours: float | None, ratio: float | None) -> bool:
        """Whether the measured value meets the target (a missing value never does)."""
        got = ratio if self.on == "ratio" else ours
        if got is None or math.isnan(got):
            return False
        return got <= self.value if self.op == "<=" else got >= self.value

    def __str__(self) -> str:
        sym = "≤" if self.op == "<=" else "≥"
        return f"{sym} {self.value:g}" if self.on == "ratio" else f"ours {sym} {self.value:g}"


@dataclass
class Row:
    r"""One line of the table. ``target`` ``None`` marks an informational row (e.g. the peak memory
    beside a layer's time), which is always ``met``. ``note`` goes to ``perf.md`` and the printed
    table only (input source, fallbacks, memory method), never to ``perf.json``."""

    name: str
    ours: float | None
    reference: float | None
    unit: str
    target: Target | None = None
    note: str = ""
    met: bool = field(init=False)
    ratio: float | None = field(init=False)

    def __post_init__(self) -> None:
        self.ratio = (self.ours / self.reference
                      if self.ours is not None and self.reference not in (None, 0) else None)
        self.met = True if self.target is None else self.target.check(self.ours, self.ratio)

    def to_json(self) -> dict[str, object]:
        """The row as a ``perf.json`` object with exactly :data:`JSON_KEYS`."""
        return {
            "name": self.name,
            "ours": _finite(self.ours),
            "reference": _finite(self.reference),
            "unit": self.unit,
            "ratio": _finite(self.ratio),
            "target": None if self.target is None else str(self.target),
            "met": bool(self.met),
        }


def _finite(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


@dataclass(frozen=True)
class Settings:
    r"""What a suite run measures with: the device, and how much it repeats.

    ``repeats`` timed calls per side after ``warmup`` calls; ``train_steps`` optimiser steps for the
    throughput row; ``spd_graphs`` Peptides-func graphs for the shortest-path row; ``agf_sizes``
    the node counts of the AGF scaling rows; ``layer_datasets`` the mini-batches of the layer rows
    (the quick mode keeps ZINC only: a dense Peptides-func batch is 64 × ~440 nodes, and its rows
    alone would take the quick run past its 3-minute budget on 2 cores); ``scale_rows`` the
    molecules of the PCQM4Mv2 replica of the ``scale`` rows (:mod:`~gea_graph.bench.perf.scale`); ``step_batches``
    the batch sizes of the compiled training-step row (:func:`~gea_graph.bench.perf.compiled.training_step_row`).
    """

    device: torch.device
    quick: bool
    repeats: int
    warmup: int
    train_steps: int
    spd_graphs: int
    agf_sizes: tuple[int, ...] = (256, 1024, 4096)
    layer_datasets: tuple[str, ...] = ("ZINC", "Peptides-func")
    #: The :func:`torch.compile` backend of the compiled-vs-eager rows (the tiny test setting uses ``"aot_eager"``,
    #: which needs no C++ build).
    compile_backend: str = "inductor"
    scale_rows: int = 100_000
    #: Graphs in each batch of the compiled training-step row's stream (a one-graph batch included, as an epoch's
    #: last batch can be).
    step_batches: tuple[int, ...] = (128, 64, 97, 1)

    @classmethod
    def make(cls, quick: bool, device: torch.device) -> Settings:
        """The quick (CI-sized) or the full settings for ``device``."""
        if quick:
            return cls(device, True, repeats=20, warmup=2, train_steps=20, spd_graphs=64,
                       layer_datasets=("ZINC",), scale_rows=20_000, step_batches=(32, 17, 1))
        return cls(device, False, repeats=30, warmup=5, train_steps=200, spd_graphs=512)

    @classmethod
    def tiny(cls, device: torch.device | None = None) -> Settings:
        """Smallest settings that still exercise every code path (for the smoke test)."""
        return cls(device or torch.device("cpu"), True, repeats=1, warmup=0, train_steps=2, spd_graphs=3,
                   agf_sizes=(16, 32, 64), compile_backend="aot_eager", scale_rows=300,
                   step_batches=(32,))  # the model row's batch: compiled once


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; otherwise ``torch.device(name)``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds taken by one call of ``fn`` (device work included)."""
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def time_pair(ours: Callable[[], object], reference: Callable[[], object], settings: Settings,
              between: Callable[[], object] = lambda: None) -> tuple[float, float]:
    r"""Median seconds per call of ``ours`` and ``reference``, interleaved (see the module doc).
    ``between`` runs untimed after every call (e.g. dropping gradients)."""
    for _ in range(settings.warmup):
        for fn in (ours, reference):
            fn()
            between()
    t_ours: list[float] = []
    t_ref: list[float] = []
    for i in range(settings.repeats):
        order = ((ours, t_ours), (reference, t_ref))
        for fn, acc in (order if i % 2 == 0 else order[::-1]):
            acc.append(timed(fn, settings.device))
            between()
    return statistics.median(t_ours), statistics.median(t_ref)


def peak_memory(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes of tensor storage allocated during one call of ``fn`` (see the module doc)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return int(peak)


def train_step(module: Module, forward: Callable[[], object]) -> Callable[[], None]:
    r"""A step for the layer rows: ``forward()``, then backward of the sum of every output tensor
    that requires grad (a tuple output — ``(x, edge_attr)`` — counts all of its tensors)."""

    def step() -> None:
        out = forward()
        outs = out if isinstance(out, (tuple, list)) else (out,)
        loss = sum(o.float().sum() for o in outs
                   if isinstance(o, torch.Tensor) and o.requires_grad)
        loss.backward()

    return step


def layer_rows(name: str, ours: Module, ours_fn: Callable[[], object], reference: Module,
               reference_fn: Callable[[], object], target: Target | None, settings: Settings,
               note: str = "") -> list[Row]:
    r"""Time (forward + backward) and peak memory rows for one pair of layers."""
    step_ours = train_step(ours, ours_fn)
    step_ref = train_step(reference, reference_fn)

    def drop_grads() -> None:
        ours.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)

    ours.train()
    reference.train()
    t_ours, t_ref = time_pair(step_ours, step_ref, settings, between=drop_grads)
    m_ours = peak_memory(step_ours, settings.device)
    drop_grads()
    m_ref = peak_memory(step_ref, settings.device)
    drop_grads()
    return [
        Row(name, t_ours * 1e3, t_ref * 1e3, "ms/step", target, note),
        Row(f"{name} · peak memory", m_ours / 2**20, m_ref / 2**20, "MiB", None,
            "peak bytes allocated during one step"),
    ]


# ------------------------------------------------------------------------------------------------
# Reports

def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if v == 0 or 0.01 <= abs(v) < 1e5:
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    return f"{v:.3e}"


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table (ours, reference, ratio, target, met, note)."""
    lines = ["| row | ours | reference | unit | ratio | target | met | note |",
             "|---|---:|---:|---|---:|---|---|---|"]
    for r in rows:
        met = "—" if r.target is None else ("yes" if r.met else "**no**")
        lines.append(f"| {r.name} | {_fmt(r.ours)} | {_fmt(r.reference)} | {r.unit} | "
                     f"{_fmt(r.ratio)} | {r.target or '—'} | {met} | {r.note} |")
    return "\n".join(lines)


def environment_line(settings: Settings) -> str:
    """One line describing where and how the suite ran."""
    dev = (torch.cuda.get_device_name(settings.device) if settings.device.type == "cuda"
           else "CPU")
    return (f"device {settings.device} ({dev}), torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, {'quick' if settings.quick else 'full'} mode: "
            f"median of {settings.repeats} after {settings.warmup} warm-up calls")


def write_reports(rows: Sequence[Row], out_dir: Path, settings: Settings, seconds: float) -> None:
    """Writes ``perf.md`` (the table) and ``perf.json`` (the rows) into ``out_dir``."""
    ensure_folder(out_dir)
    md = ["# gea-graph perf", "", environment_line(settings) + f"; suite took {seconds:.0f} s.", "",
          format_table(rows), ""]
    write_text(out_dir / "perf.md", "\n".join(md))
    write_json(out_dir / "perf.json", [r.to_json() for r in rows])
