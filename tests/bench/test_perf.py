"""Smoke test of the performance suite: it runs at tiny sizes and writes the reports with the right
keys. Wall-clock results are never asserted (they are noise on shared machines)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gea_graph.bench import perf_data, perf_pipeline
from gea_graph.bench.perf import JSON_KEYS, Row, Settings, Target, run_suite
from gea_graph.cli import build_parser

# Every group except the dataset build (all 12k ZINC molecules by design) and the training
# throughput (trains on that build): both are covered by `gea-graph perf --quick`.
SMOKE_GROUPS = ["external", "gps", "geaet", "graphormer", "agf", "spd"]


def _few_random_graphs(dataset: str, count: int) -> tuple:
    return perf_data.random_graphs(dataset, min(count, 8)), "random (test)"


def test_suite_writes_reports_with_exact_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    # Tiny inputs: a few random molecule-like graphs instead of the real mini-batches.
    monkeypatch.setattr(perf_data, "real_graphs", _few_random_graphs)
    monkeypatch.setattr(perf_pipeline, "real_graphs", _few_random_graphs)
    rows = run_suite(Settings.tiny(), tmp_path, only=SMOKE_GROUPS, log=lambda _: None)
    assert rows
    data = json.loads((tmp_path / "perf.json").read_text())
    assert len(data) == len(rows)
    for obj in data:
        assert tuple(obj) == JSON_KEYS
        assert isinstance(obj["met"], bool)
        assert isinstance(obj["name"], str) and isinstance(obj["unit"], str)
    table = (tmp_path / "perf.md").read_text()
    for row in rows:
        assert row.name in table


def test_failing_group_becomes_an_unmet_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    def broken(_: Settings) -> list:
        raise RuntimeError("boom")

    monkeypatch.setattr("gea_graph.bench.perf.row_groups", lambda: {"broken": broken})
    rows = run_suite(Settings.tiny(), tmp_path, log=lambda _: None)
    assert [r.name for r in rows] == ["broken"]
    assert rows[0].met is False and "boom" in rows[0].note


def test_row_ratio_and_targets() -> None:
    assert Row("a", 2.0, 4.0, "ms", Target("<=", 1.0)).met
    assert not Row("b", 5.0, 4.0, "ms", Target("<=", 1.0)).met
    assert Row("c", 100.0, 110.0, "graphs/s", Target(">=", 0.8)).ratio == pytest.approx(100 / 110)
    absolute = Row("d", 12.0, None, "s", Target("<=", 30.0, on="ours"))
    assert absolute.ratio is None and absolute.met
    assert Row("e", 1.0, 2.0, "MiB").met  # informational rows (no target) are always met


def test_cli_registers_perf() -> None:
    args = build_parser().parse_args(["perf", "--quick", "--out", "x", "--only", "agf"])
    assert args.quick and args.out == Path("x") and args.only == ["agf"] and callable(args.func)
