"""``gea-graph sweep`` with its embedded store (DIR/optuna.db; no server): trials as run folders, the study's total of
finished trials across reruns, two worker processes on one file, the outputs, ``--report`` and ``--confirm``."""

from __future__ import annotations

import csv
import json

import optuna
import yaml

from gea_graph.train import load_recipe, read_result
from tests.sweep.conftest import run_sweep


def trials_csv(out):
    with open(out / "trials.csv", newline="") as f:
        return list(csv.DictReader(f))


def load(out, name="tiny"):
    return optuna.load_study(study_name=f"{out.name}:{name}", storage=f"sqlite:///{out / 'optuna.db'}")


def test_embedded_sweep_reruns_jobs_outputs_report_and_confirm(tmp_path, tiny, sweep_env, capsys, monkeypatch):
    from gea_graph.cli import main

    monkeypatch.setenv("GEA_GRAPH_DATA", sweep_env["GEA_GRAPH_DATA"])
    out = tmp_path / "sweep"
    first = run_sweep(sweep_env, str(tiny), "--out", str(out), "--trials", "2", "--seed", "3", "--jobs", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    study = load(out)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    assert len({json.dumps(t.params, sort_keys=True) for t in study.trials}) == 2  # two workers, distinct draws
    # --trials 3 after --trials 2 runs one more; then a --trials 3 rerun runs none
    capsys.readouterr()
    assert main(["sweep", str(tiny), "--out", str(out), "--trials", "3", "--seed", "3", "--confirm", "7"]) == 0
    assert len(load(out).trials) == 3
    assert "[tiny 3/3] trial 2: complete, val accuracy" in capsys.readouterr().out
    assert main(["sweep", str(tiny), "--out", str(out), "--trials", "3", "--seed", "3"]) == 0
    assert len(load(out).trials) == 3 and "trial 3" not in capsys.readouterr().out

    study = load(out)
    rows = trials_csv(out)
    assert [int(r["trial"]) for r in rows] == [0, 1, 2] and {r["state"] for r in rows} == {"COMPLETE"}
    for row, trial in zip(rows, study.trials):
        run = out / row["run_dir"]
        result = read_result(run)  # each trial is a normal, complete run folder
        assert result is not None and float(row["val_metric"]) == result["val"] == trial.value
        assert int(row["epochs"]) == result["epochs"] == 3 and int(row["params"]) == result["params"]
        assert len(trial.intermediate_values) == 3  # the pruning callback reported every epoch
        assert load_recipe(run / "recipe.yaml").model.hidden == trial.params["model.hidden"] == \
            int(row["param:model.hidden"])
        assert float(row["time_s"]) > 0

    best = max if study.directions[0].name == "MAXIMIZE" else min
    winner = best(study.trials, key=lambda t: (t.value, -t.number))
    tuned = load_recipe(out / "best-tiny.yaml")
    assert tuned.name == "tiny-tuned" and not tuned.sweep
    assert (tuned.model.hidden, tuned.optim.lr, tuned.model.mpnn) == tuple(
        winner.params[k] for k in ("model.hidden", "optim.lr", "model.mpnn"))

    report = (out / "sweep.md").read_text()
    assert "## tiny (validation accuracy, higher is better)" in report and "| rank | trial | val |" in report
    assert f"Best: trial {winner.number}" in report
    for png in ("history-tiny.png", "importance-tiny.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG" and f"]({png})" in report
    # --confirm: the best configuration retrained on a new seed by bench, in a bench folder of its own
    confirm = read_result(out / "confirm" / "tiny-tuned" / "seed7")
    assert confirm is not None and confirm["seed"] == 7
    assert "## Tuned comparison (confirmation seeds)" in report and "| tiny-tuned |" in report
    assert (out / "confirm" / "results.csv").is_file() and (out / "confirm" / "bench.json").is_file()
    info = json.loads((out / "sweep.json").read_text())
    assert info["storage"] == "embedded" and len(info["invocations"]) == 3

    (out / "trials.csv").unlink()
    (out / "sweep.md").unlink()
    assert main(["sweep", str(out), "--report"]) == 0
    assert trials_csv(out) == rows and "## Tuned comparison" in (out / "sweep.md").read_text()

    # the results page's section "Tuned at equal budget", rendered from this real sweep
    page = tmp_path / "docs" / "results.md"
    assert make_results().main(["--sweep", str(out), "--out", str(page)]) == 0
    text = page.read_text()
    section = text[text.index("## Tuned at equal budget"):text.index("## GPU reproduction queue")]
    assert f"Made by `{info['command']}`" in section and "confirmation: `gea-graph bench --recipes " in section
    assert "- machine: " in section and f"commit {info['machine']['commit']}" in section
    assert "- load average (1 min" in section and "3 finished trials per recipe" in section
    assert (f"| tiny | 3 / 0 / 0 | {max(t.value for t in study.trials):.4f} (accuracy) | {confirm['params']:,} | 7 | "
            f"{confirm['epochs']} | {confirm['val']:.4f} ± 0.0000 | {confirm['test']:.4f} ± 0.0000 |") in section
    assert (page.parent / "results" / "sweep-sweep-history-tiny.png").is_file()
    assert "\npython scripts/make_results.py --sweep " in text  # the page names the folder it was made from


def make_results():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "make_results.py"
    spec = importlib.util.spec_from_file_location("make_results", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_results_section_gives_the_command_to_run_before_any_sweep(tmp_path):
    page = tmp_path / "results.md"
    assert make_results().main(["--out", str(page)]) == 0
    text = page.read_text()
    assert "## Tuned at equal budget" in text and "Not measured yet: run, on a quiet machine, `gea-graph sweep " \
        "gatedgcn-zinc-cpu,gatedgcn-geanet-zinc-cpu,gps-zinc-cpu,geaet-zinc-cpu" in text


def test_other_settings_or_seeds_are_refused_before_anything_is_written(tmp_path, tiny, sweep_env):
    from gea_graph.cli import main

    out = tmp_path / "sweep"
    assert main(["sweep", str(tiny), "--out", str(out), "--trials", "1", "--confirm", "0"]) == 2  # seed 0 trained
    assert not out.exists()
    assert main(["sweep", str(tiny), "--out", str(out), "--trials", "1", "--max-params", "100"]) == 0
    rows = trials_csv(out)
    assert rows[0]["state"] == "PRUNED" and "parameters > --max-params 100" in rows[0]["reason"]
    assert rows[0]["run_dir"] == "" and not (out / "tiny").exists()  # pruned before any training
    before = sorted(p.name for p in out.iterdir())
    assert main(["sweep", str(tiny), "--out", str(out), "--trials", "2", "--max-time", "5"]) == 2
    assert main(["sweep", str(tiny), "--out", str(out), "--trials", "2", "--study", "other"]) == 2
    assert sorted(p.name for p in out.iterdir()) == before
    assert yaml.safe_load((out / "sweep.json").read_text())["max_params"] == 100


def test_a_relative_sqlite_storage_is_found_from_another_folder(tmp_path, tiny, sweep_env, monkeypatch, capsys):
    # `--storage sqlite:///studies.db` names a file in the working folder; sweep.json kept it relative, so
    # `--report` run elsewhere opened (and created) an empty studies.db there and found no study.
    from gea_graph.cli import main

    first, elsewhere = tmp_path / "first", tmp_path / "elsewhere"
    first.mkdir()
    elsewhere.mkdir()
    out = tmp_path / "sweep"
    monkeypatch.chdir(first)
    args = ["sweep", str(tiny), "--out", str(out), "--trials", "1", "--max-params", "100", "--study", "rel"]
    assert main([*args, "--storage", "sqlite:///studies.db"]) == 0, capsys.readouterr().err
    assert (first / "studies.db").is_file()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["sweep", str(out), "--report"]) == 0, capsys.readouterr().err
    assert list(elsewhere.iterdir()) == [] and trials_csv(out)[0]["state"] == "PRUNED"
    (first / "studies.db").unlink()
    assert main(["sweep", str(out), "--report"]) == 2
    assert "is missing: there is no file" in capsys.readouterr().err and list(elsewhere.iterdir()) == []


def test_a_surplus_trial_is_a_reason_in_trials_csv_not_a_traceback(tmp_path, tiny, monkeypatch):
    # Two workers race for a study's last trial: the one that starts it after the other's finished fails it as
    # surplus. Optuna logged that as "Trial N failed ..." with a SurplusTrial traceback on the console.
    import logging

    from gea_graph.cli import main
    from gea_graph.sweep import worker

    out = tmp_path / "sweep"
    args = ["sweep", str(tiny), "--out", str(out), "--trials", "1", "--max-params", "100"]
    assert main(args) == 0
    real, looks = worker.counts, []

    def before_the_other_finished(study):  # the first look predates the other worker's finished trial
        state = real(study)
        looks.append(1)
        return {**state, optuna.trial.TrialState.PRUNED: 0} if len(looks) == 1 else state

    monkeypatch.setattr(worker, "counts", before_the_other_finished)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    logging.getLogger("optuna").addHandler(handler)
    try:
        assert main(args) == 0
    finally:
        logging.getLogger("optuna").removeHandler(handler)
    rows = trials_csv(out)
    assert [r["state"] for r in rows] == ["PRUNED", "FAIL"] and rows[1]["reason"].startswith("surplus")
    assert [r.getMessage() for r in records if r.name == "optuna.study._optimize"] == []


def test_a_sweep_without_a_complete_trial_says_so_plainly(tmp_path, tiny, sweep_env):
    # sweep.md said "Study `sweep` in embedded", and Optuna warned "There are no complete trials." and "Study instance
    # does not contain completed trials." when the report asked it to plot a study of pruned trials only
    out = tmp_path / "sweep"
    proc = run_sweep(sweep_env, str(tiny), "--out", str(out), "--trials", "1", "--max-params", "100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = proc.stdout + proc.stderr
    assert "no complete trials" not in console.lower() and "does not contain completed trials" not in console
    report = (out / "sweep.md").read_text()
    assert "Study `sweep` in the sweep's own SQLite file (`optuna.db`); 1 finished trial per recipe" in report
    assert "No trial completed: nothing to rank or plot." in report and ".png" not in report
    assert not list(out.glob("*.png"))
