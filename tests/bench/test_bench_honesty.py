"""Issue 23 for `gea-graph bench`: planted links are never written through (D2), a repeated seed or recipe counts once
(D4), runs of other settings are never averaged (D5), a run that finished no epoch never counts as complete (D6),
and make_results keeps reading older bench folders honestly."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from lightning.pytorch.callbacks import Callback

from gea_graph.bench import runner
from gea_graph.cli import main
from gea_graph.train import fit, load_recipe, read_result
from gea_graph.train.run import NoEpochError

ROOT = Path(__file__).resolve().parents[2]
FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 24, "avg_num_nodes": 5, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "mpnn", "mpnn": "gine", "task": "graph_classification", "out_channels": 3, "hidden": 8,
              "layers": 1, "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2},
    "trainer": {"max_epochs": 1, "batch_size": 8, "seeds": [0, 1]},
}


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-fake.yaml"
    path.write_text(yaml.safe_dump(FAKE))
    return path


def bench(recipe: Path | str, out: Path, *more: str) -> int:
    return main(["bench", "--recipes", str(recipe), "--out", str(out), "--accelerator", "cpu", *more])


def rows(out: Path) -> list[dict]:
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gea-graph bench: error:")]
    assert len(err) == 1, err
    return err[0]


def fake_result(run_dir: Path, seed: int, test: float, epochs: int = 1) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "result.json").write_text(json.dumps({
        "recipe": "tiny-fake", "dataset": "FakeDataset", "seed": seed, "params": 10, "metric": "accuracy",
        "higher_is_better": True, "epochs": epochs, "best_epoch": 0, "val": test, "test": test,
        "train_time_s": 1.0, "peak_memory_mb": 1.0}))


def test_links_are_never_written_through_and_a_repeat_counts_once(recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data")
    for name in (".bench.json.tmp", "results.csv", "results.md", "curves.png"):
        (out / name).symlink_to(victim)  # D2: the fixed temporary name and the reports
    copy = tmp_path / "copy" / "tiny-fake.yaml"  # D4: the same recipe twice (as a name and as a path), seed 0 twice
    copy.parent.mkdir()
    copy.write_text(yaml.safe_dump(FAKE))
    capsys.readouterr()
    assert bench(f"{recipe},{recipe}", out, "--seeds", "0,0") == 0
    printed = capsys.readouterr().out
    assert "--seeds gives 0 more than once; it counts once" in printed
    assert f"--recipes gives {recipe} more than once; it counts once" in printed
    assert victim.read_text() == "precious data"
    assert not any((out / name).is_symlink() for name in ("results.csv", "results.md", "curves.png"))
    assert [(r["recipe"], r["seed"]) for r in rows(out)] == [("tiny-fake", "0")]
    assert "| tiny-fake | 323 | 1 | 1 |" in (out / "results.md").read_text()  # one seed, not "2 seeds, ± 0"
    record = json.loads((out / "bench.json").read_text())["runs"]["tiny-fake/seed0"]
    assert record["max_time_min"] is None and record["jobs"] == 1 and record["threads"] is None
    assert len(record["code"]) == 1 and len(record["recipe"]) == 10
    info = json.loads((out / "bench.json").read_text())  # the machine of each invocation and each run
    assert record["devices"] == [info["invocations"][-1]["device"]] == [runner.device_label(info["machine"])]

    assert bench(f"{recipe},{copy}", out, "--seeds", "0") == 2  # two recipes of one name would share a folder
    assert "are both named 'tiny-fake'" in error_line(capsys)

    other = tmp_path / "other"
    log = other / "tiny-fake" / "seed1" / "train.log"  # a run's log (--jobs 2) through a planted link
    log.parent.mkdir(parents=True)
    log.symlink_to(victim)
    assert bench(recipe, other, "--seeds", "1", "--jobs", "2") == 2
    assert "train.log is a symbolic link" in error_line(capsys)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    log.parent.rename(tmp_path / "moved")
    (other / "tiny-fake" / "seed1").symlink_to(elsewhere)  # a run folder planted as a link to another place
    assert bench(recipe, other, "--seeds", "1") == 2
    assert "seed1 is a symbolic link" in error_line(capsys)
    assert victim.read_text() == "precious data" and not any(elsewhere.iterdir())


def test_runs_of_other_settings_are_never_averaged(recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    assert bench(recipe, out, "--seeds", "0", "--max-time", "5") == 0
    before = (out / "bench.json").read_text()
    # D5: the sibling seed (or a resume of the same one) under another cap, threads, jobs or recipe is refused
    for more, said in ((["--max-time", "7"], "was trained with a cap of 5 min, this bench gives a cap of 7 min"),
                       (["--max-time", "5", "--threads", "1"], "with torch's default threads, this bench gives 1 "),
                       (["--max-time", "5", "--set", "model.hidden=16"], "was trained with recipe ")):
        assert bench(recipe, out, "--seeds", "1", *more) == 2
        assert said in error_line(capsys)
    assert bench(recipe, out, "--seeds", "0", "--max-time", "7") == 2
    assert not (out / "tiny-fake" / "seed1").exists() and (out / "bench.json").read_text() == before

    # the guarded feature: the same settings add a seed, and the two are averaged
    assert bench(recipe, out, "--seeds", "0,1", "--max-time", "5") == 0
    assert "| tiny-fake | 323 | 2 | 1 |" in (out / "results.md").read_text()

    # runs resumed or trained on other code get rows of their own (here: a record edited as another version would)
    info = json.loads((out / "bench.json").read_text())
    info["runs"]["tiny-fake/seed1"]["code"] = ["0123456789"]
    (out / "bench.json").write_text(json.dumps(info))
    assert bench(recipe, out, "--seeds", "0,1", "--max-time", "5") == 0
    md = (out / "results.md").read_text()
    code0 = info["runs"]["tiny-fake/seed0"]["code"][0]
    assert f"| tiny-fake [code {code0}] | 323 | 1 |" in md and "| tiny-fake [code 0123456789] | 323 | 1 |" in md
    assert "are not averaged: each has a row of its own" in md
    assert {r["code"] for r in rows(out)} == {code0, "0123456789"}
    page = tmp_path / "results.md"
    assert make_results().main([str(out), "--out", str(page)]) == 0
    text = page.read_text()
    assert f"tiny-fake [code {code0}]" in text and "tiny-fake [code 0123456789]" in text
    assert "cap per run: 5 min (each run's own, from bench.json)" in text


def test_a_bench_json_without_run_records_is_compared_with_its_last_settings(recipe, tmp_path, capsys):
    out = tmp_path / "old"
    for seed, test in ((0, 0.5), (1, 0.7)):
        fake_result(out / "tiny-fake" / f"seed{seed}", seed, test)
    (out / "bench.json").write_text(json.dumps({  # as benches wrote it before per-run records
        "invocations": [{"start": "2026-11-23 22:51 UTC", "end": "2026-11-24 02:02 UTC", "load_average": [2.0]}],
        "command": "gea-graph bench --recipes tiny-fake", "jobs": 2, "threads": 1, "max_time_min": 10,
        "overrides": [], "machine": {"cpu": "x", "cores": 2, "gpu": None}}))
    assert bench(recipe, out, "--max-time", "5", "--jobs", "2", "--threads", "1") == 2
    assert ("(its bench.json records the settings of the last invocation only), this bench gives a cap of 5 min"
            in error_line(capsys))
    assert bench(recipe, out, "--max-time", "10", "--jobs", "2", "--threads", "1") == 0  # all complete: skipped
    assert "| tiny-fake | 10 | 2 | 1 | 0.6000 ± 0.1000 |" in (out / "results.md").read_text()
    page = tmp_path / "results.md"
    assert make_results().main([str(out), "--out", str(page)]) == 0
    assert "cap per run: 10 min (each run's own, from bench.json)" not in page.read_text()

    (out / "results.csv").write_text("recipe,seed\n../../escaped,0\n")  # D3: a name is one path component
    with pytest.raises(SystemExit, match="recipe: '../../escaped' is not allowed; it must be one path component"):
        make_results().main([str(out), "--out", str(page)])


class StopAtStart(Callback):
    def on_train_start(self, trainer, pl_module) -> None:
        trainer.should_stop = True


def test_a_run_without_an_epoch_is_never_complete(recipe, tmp_path, capsys):
    run_dir = tmp_path / "run"
    with pytest.raises(NoEpochError, match="no epoch finished before the run was stopped"):
        fit(load_recipe(recipe), run_dir, accelerator="cpu", devices=1, progress=False, verbose=False,
            callbacks=[StopAtStart()])
    assert not (run_dir / "result.json").exists() and read_result(run_dir) is None

    out = tmp_path / "bench"  # a 0-epoch result.json of an older version: not skipped as complete, but trained
    fake_result(out / "tiny-fake" / "seed0", 0, float("nan"), epochs=0)
    assert bench(recipe, out, "--seeds", "0") == 0
    assert "complete, skipped" not in capsys.readouterr().out
    assert read_result(out / "tiny-fake" / "seed0")["epochs"] == 1 and rows(out)[0]["epochs"] == "1"
    assert bench(recipe, out, "--seeds", "0", "--max-time", "-1") == 2  # D6: the cap that made it is refused
    assert "argument --max-time: '-1' is not allowed" in capsys.readouterr().err


def make_results():
    spec = importlib.util.spec_from_file_location("make_results", ROOT / "scripts" / "make_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bench_json_that_is_not_a_record_is_one_line(recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    out.mkdir()
    (out / "bench.json").write_text("not json")
    assert bench(recipe, out, "--seeds", "0") == 2
    assert "bench.json is not a bench record" in error_line(capsys)
    assert (out / "bench.json").read_text() == "not json" and sorted(os.listdir(out)) == ["bench.json"]
