"""``gea-graph bench``: runs recipe x seed, writes results.csv / results.md / curves.png, skips complete runs."""
import csv
import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
import yaml

from gea_graph.bench import runner, suites
from gea_graph.cli import main

FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 40, "avg_num_nodes": 6, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "mpnn", "mpnn": "gine", "task": "graph_classification", "out_channels": 3, "hidden": 8,
              "layers": 1, "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2},
    "trainer": {"max_epochs": 1, "batch_size": 16, "seeds": [0, 1]},
    "paper": {"source": "Nobody (2099), Table 0", "metric": "accuracy", "value": 0.5, "std": 0.1},
}


def test_bench_writes_results_and_skips_complete_runs(tmp_path, monkeypatch, capsys):
    recipe = tmp_path / "tiny-fake.yaml"
    recipe.write_text(yaml.safe_dump(FAKE))
    out = tmp_path / "bench"
    assert main(["bench", "--recipes", str(recipe), "--seeds", "0", "--out", str(out), "--accelerator", "cpu"]) == 0
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["recipe"] for r in rows] == ["tiny-fake"]
    assert set(runner.CSV_COLUMNS) == set(rows[0])
    assert int(rows[0]["epochs"]) == 1 and int(rows[0]["params"]) > 0
    md = (out / "results.md").read_text()
    assert "tiny-fake" in md and "0.5000 ± 0.1000" in md and "Nobody (2099)" in md
    assert (out / "curves.png").stat().st_size > 0

    popen = runner.subprocess.Popen

    def no_training(cmd, *args, **kwargs):
        if "train" in cmd:
            raise AssertionError("a complete run was trained again")
        return popen(cmd, *args, **kwargs)

    monkeypatch.setattr(runner.subprocess, "Popen", no_training)
    capsys.readouterr()
    assert main(["bench", "--recipes", str(recipe), "--seeds", "0", "--out", str(out)]) == 0
    assert "complete, skipped" in capsys.readouterr().out


def test_markdown_aggregates_seeds_and_depth_plot(tmp_path):
    recipe = tmp_path / "gcn-tree-r3.yaml"
    raw = dict(FAKE, paper=None)
    recipe.write_text(yaml.safe_dump(raw))
    runs = runner.plan([str(recipe)], [0, 1], tmp_path)
    for run, test in zip(runs, (0.5, 0.7)):
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "result.json").write_text(json.dumps({
            "recipe": "gcn-tree-r3", "dataset": "tree-r3", "seed": run.seed, "params": 10, "metric": "accuracy",
            "higher_is_better": True, "epochs": 3, "best_epoch": 1, "val": test, "test": test,
            "train_time_s": 1.0, "peak_memory_mb": 1.0}))
    md = runner.markdown(runs)
    assert "| gcn-tree-r3 | 10 | 2 | 3 | 0.6000 ± 0.1000 | 0.6000 ± 0.1000 | – |" in md
    runner.plot_depth_sweep(runs, tmp_path / "sweep.png")
    assert Path(tmp_path / "sweep.png").stat().st_size > 0


def test_depth_plot_draws_train_dashed_beside_test_solid(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(runner, "save_figure", lambda fig, path, dpi: figures.append(fig))
    runs = []
    for depth, train in ((2, 1.0), (3, None)):  # r=3 made without the train pass: no train point
        recipe = tmp_path / f"gcn-tree-r{depth}.yaml"
        recipe.write_text(yaml.safe_dump(dict(FAKE, paper=None)))
        (run,) = runner.plan([str(recipe)], [0], tmp_path)
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "result.json").write_text(json.dumps({
            "recipe": run.recipe.name, "dataset": f"tree-r{depth}", "seed": 0, "params": 10, "metric": "accuracy",
            "higher_is_better": True, "epochs": 3, "best_epoch": 1, "val": 0.5, "test": 0.5, "train_time_s": 1.0,
            "peak_memory_mb": 1.0, **({"train": train} if train is not None else {})}))
        runs.append(run)
    runner.plot_depth_sweep(runs, tmp_path / "sweep.png")
    lines = {bars.get_label(): bars.lines[0] for bars in figures[0].axes[0].containers}  # errorbar: data line
    assert sorted(lines) == ["gcn test", "gcn train"]
    assert (lines["gcn test"].get_linestyle(), lines["gcn train"].get_linestyle()) == ("-", "--")
    assert list(lines["gcn test"].get_xdata()) == [2, 3] and list(lines["gcn train"].get_ydata()) == [1.0]
    assert lines["gcn test"].get_color() == lines["gcn train"].get_color()
    assert list(figures[0].axes[0].get_xticks()) == [2, 3]  # one tick per radius, none between


def test_suite_lists_every_model_and_depth():
    suite = suites.get_suite("tree-neighbours-match").recipes
    assert len(suite) == 30 and "geaet-tree-r7" in suite and "gatedgcn-tree-r2" in suite
    for name in suite:
        assert runner.resolve_recipe(name).is_file()


def test_every_suite_resolves_and_lists_its_size():
    for suite in suites.SUITES.values():
        runs, epochs = suite.size()
        assert runs >= len(suite.recipes) and epochs >= runs, suite.name
    text = suites.list_suites([0])
    assert "tree-neighbours-match" in text and " 30 " in text
    with pytest.raises(KeyError, match="known: "):
        suites.get_suite("nosuch")


def test_cli_lists_suites(capsys):

    assert main(["bench", "--list-suites"]) == 0
    assert "tree-neighbours-match" in capsys.readouterr().out
    assert main(["bench", "--suite", "nosuch"]) == 2


def test_markdown_states_how_our_zinc_differs_from_the_papers_only_for_ogb_features(tmp_path):
    runs = []
    for name, options in (("gcn-zinc", {}), ("gcn-zinc-ogb", {"features": "ogb"})):
        recipe = tmp_path / f"{name}.yaml"
        recipe.write_text(yaml.safe_dump({**FAKE, "data": {"name": "zinc", "options": options}}))
        (run,) = runner.plan([str(recipe)], [0], tmp_path)
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "result.json").write_text(json.dumps({
            "recipe": name, "dataset": "zinc", "seed": 0, "params": 10, "metric": "mae",
            "higher_is_better": False, "epochs": 3, "best_epoch": 1, "val": 0.2, "test": 0.2,
            "train_time_s": 1.0, "peak_memory_mb": 1.0}))
        runs.append(run)
    md = runner.markdown(runs)
    assert "Note (gcn-zinc-ogb): " in md and "28 atom types" in md and "not a like-for-like comparison" in md
    assert "not a like-for-like" not in runner.markdown(runs[:1])  # the default (bench) encoding is the papers'


def test_extra_metrics_reach_csv_and_markdown(tmp_path):
    """PCQM-Contact runs (GEAET Table 9): Hits@k and the filtered MRR beside the raw MRR, ours and the paper's."""
    raw = dict(FAKE, paper={"source": "GEAET (Liang et al., 2024), Table 9", "metric": "MRR", "value": 0.3518,
                            "std": 0.0011, "extra": {"hits@1": [0.1566, 0.0014]}})
    recipe = tmp_path / "geaet-pcqm-contact.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    runs = runner.plan([str(recipe)], [0, 1], tmp_path)
    for run, hits in zip(runs, (0.1, 0.3)):
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "result.json").write_text(json.dumps({
            "recipe": "geaet-pcqm-contact", "dataset": "pcqm-contact", "seed": run.seed, "params": 10,
            "metric": "mrr", "higher_is_better": True, "epochs": 3, "best_epoch": 1, "val": 0.3, "test": 0.3,
            "train_time_s": 1.0, "peak_memory_mb": 1.0, "test_more": {"hits@1": hits, "mrr_filtered": 0.4},
            "val_more": {"hits@1": hits, "mrr_filtered": 0.4}}))
    md = runner.markdown(runs)
    assert "| test hits@1 | test mrr_filtered |" in md
    assert "| 0.2000 ± 0.1000 | 0.4000 ± 0.0000 | 0.3518 ± 0.0011; hits@1 0.1566 ± 0.0014 (MRR;" in md
    runner.write_reports(runs, tmp_path)
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[-2:] == ["test_hits@1", "test_mrr_filtered"] and float(rows[1]["test_hits@1"]) == 0.3


def test_sigterm_stops_the_runs_and_records_the_invocation_end(tmp_path, monkeypatch):
    # `kill` of a bench (a job scheduler's stop) must end it as Ctrl-C does: its training processes stopped and
    # bench.json holding the invocation's end and load average; SIGTERM's default action would skip both.
    recipe = tmp_path / "tiny-fake.yaml"
    recipe.write_text(yaml.safe_dump(FAKE))
    out = tmp_path / "bench"
    monkeypatch.setattr(runner, "train_command", lambda *args: [sys.executable, "-c", "import time; time.sleep(60)"])
    popen, procs = runner.subprocess.Popen, []

    def start_then_kill(*args, **kwargs):  # the bench receives SIGTERM while its runs are training
        procs.append(popen(*args, **kwargs))
        if len(procs) == 1:
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        return procs[-1]

    monkeypatch.setattr(runner.subprocess, "Popen", start_then_kill)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exc:
        runner.run_bench([str(recipe)], out, seeds=[0, 1], jobs=2, log=lambda line: None, poll=0.05)
    assert exc.value.code == 128 + signal.SIGTERM
    assert procs and all(proc.poll() is not None for proc in procs)  # no training process left
    session = json.loads((out / runner.BENCH_FILE).read_text())["invocations"][-1]
    assert session["end"] is not None and session["load_average"]
    assert signal.getsignal(signal.SIGTERM) is before  # the bench's handler is gone again


def test_a_new_invocation_keeps_the_machine_of_one_from_before_invocations_recorded_it():
    # Benches made before each invocation recorded its device hold the machine once, at the top level: that of the
    # last invocation. The next invocation replaces the top-level machine, so it first stamps the old one's device
    # on the invocation it belonged to (a resumed tree suite lost "Intel ... for invocation 4" on its page).
    old_machine = {"cpu": "Old CPU", "cores": 2, "gpu": None, "commit": "aaa1111"}
    previous = {"invocations": [{"start": "2026-11-24 01:00 UTC"}, {"start": "2026-11-25 01:00 UTC"}],
                "machine": old_machine}
    info = runner.bench_info(previous, "gea-graph bench --suite s", 2, 1, 7.0, [])
    assert [i.get("device") for i in info["invocations"]] == [None, "Old CPU, 2 cores"]  # the last one only
    assert info["machine"] == runner.machine_info() and "device" not in previous["invocations"][-1]
    recorded = {"invocations": [{"start": "x", "device": "NVIDIA H200"}], "machine": old_machine}
    assert runner.bench_info(recorded, None, 1, None, None, [])["invocations"][-1]["device"] == "NVIDIA H200"
    assert runner.bench_info({}, None, 1, None, None, [])["invocations"] == []
