r"""The groups of rows of ``gea-graph perf`` and :func:`run_suite`, which runs them and writes the reports."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch

from gea_graph.bench.perf import attention, compiled, gpu_step, layers, pipeline, predict, scale, training
from gea_graph.bench.perf.core import (
    Row,
    Settings,
    Target,
    environment_line,
    format_table,
    write_reports,
)

RowGroup = Callable[[Settings], Iterable[Row]]


def row_groups() -> dict[str, RowGroup]:
    """The suite's groups of rows, by name, in the order they run."""
    return {
        "dataset": pipeline.dataset_build_rows,  # first: its build is the suite's ZINC
        "external": layers.external_attention_rows,
        "gps": layers.gps_layer_rows,
        "attention": attention.attention_rows,
        "geaet": layers.geaet_layer_rows,
        "graphormer": layers.graphormer_rows,
        "agf": layers.agf_scaling_rows,
        "spd": pipeline.shortest_path_rows,
        "train": pipeline.throughput_rows,
        "geanet": training.geanet_step_rows,
        "memory": training.training_rss_rows,
        "predict": predict.predict_rows,
        "compile": compiled.compile_rows,
        "gpu": gpu_step.gpu_step_rows,
        "scale": scale.scale_rows,
    }


#: Groups that run only when named in ``only`` (``gea-graph perf --only compile scale``): compiling, and the scale
#: rows' two builds and loaders, would take ``--quick`` past its budget.
OPT_IN_GROUPS = ("compile", "scale")


def _rows_or_failure(name: str, group: RowGroup, settings: Settings) -> Iterator[Row]:
    # A group may yield its rows one by one; a failure ends it with one unmet row saying why.
    try:
        yield from group(settings)
    except Exception as err:  # noqa: BLE001 -- reported as an unmet row, see run_suite
        yield Row(name, None, None, "—", Target("<=", 0.0),
                  f"failed: {type(err).__name__}: {err}".replace("|", "/")[:300])


def run_suite(settings: Settings, out_dir: Path | None = None,
              only: Iterable[str] | None = None,
              log: Callable[[str], object] = print) -> list[Row]:
    r"""Runs the suite (or the groups named in ``only``; :data:`OPT_IN_GROUPS` only when named), prints the table,
    and writes the reports to ``out_dir`` when given, again after every row (a run stopped by a timeout keeps what it
    measured). A group that fails yields one unmet row saying why, after the rows it gave, so that one broken
    component never hides the others. The C heap's thresholds are set where a training process's adaptation
    ends them (:func:`~gea_graph.bench.perf.heap.steady_heap_thresholds`), so that no row depends on the rows before
    it."""
    from gea_graph.bench.perf.heap import steady_heap_thresholds

    steady_heap_thresholds()
    torch.manual_seed(0)
    start = time.perf_counter()
    groups = row_groups()
    names = [n for n in groups if n not in OPT_IN_GROUPS] if only is None else list(only)
    rows: list[Row] = []
    for name in names:
        t0 = time.perf_counter()
        got: list[Row] = []
        for row in _rows_or_failure(name, groups[name], settings):
            got.append(row)
            rows.append(row)
            if out_dir is not None:  # partial reports: an interrupted run keeps every row it measured
                write_reports(rows, out_dir, settings, time.perf_counter() - start)
        log(f"[perf] {name}: {time.perf_counter() - t0:.1f} s")
        log(format_table(got))
    seconds = time.perf_counter() - start
    log(environment_line(settings))
    log(format_table(rows))
    log(f"[perf] suite took {seconds:.1f} s")
    if out_dir is not None:
        write_reports(rows, out_dir, settings, seconds)
    return rows
