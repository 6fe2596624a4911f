"""The CPU-budget leaderboards: the suites and their settings, ``--jobs`` (runs at once, same results as one at a
time), the time-horizon cosine, and ``scripts/make_results.py`` on fake bench folders. Nothing here trains for more
than a few steps."""
from __future__ import annotations

import csv
import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from gea_graph.bench import runner, suites
from gea_graph.cli import main
from gea_graph.train import fit, load_recipe
from gea_graph.train.module import cosine_over_time

ROOT = Path(__file__).resolve().parents[2]

FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 24, "avg_num_nodes": 5, "num_channels": 3, "edge_dim": 2, "num_classes": 2}},
    "model": {"family": "mpnn", "mpnn": "gine", "task": "graph_classification", "out_channels": 2, "hidden": 8,
              "layers": 1, "node_encoder": "linear", "node_in": 3, "edge_encoder": "linear", "edge_in": 2},
    "trainer": {"max_epochs": 2, "batch_size": 8, "seeds": [0, 1]},
}


def _recipe(tmp_path: Path, name: str, raw: dict | None = None) -> Path:
    path = tmp_path / "recipes" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(raw or FAKE))
    return path


# -- the suites ---------------------------------------------------------------------------------------------------


def test_zinc_suite_has_every_family_and_both_peers():
    suite = suites.get_suite("zinc-cpu-10min")
    assert (suite.seeds, suite.max_time, suite.jobs, suite.threads) == ((0, 1), 10, 2, 1)
    models = {name: load_recipe(name).model for name in suite.recipes}
    kinds = {(m.family, m.mpnn if m.family != "graphormer" else None, m.attn, m.gea) for m in models.values()}
    assert ("geaet", "gatedgcn", "softmax", True) in kinds        # GEAET
    assert ("geaet", "gatedgcn", "softmax", False) in kinds       # the GPS-style layer
    assert ("geaet", "gatedgcn", "gfsa", True) in kinds           # GEAET with GFSA attention
    for mpnn in ("gatedgcn", "gcn", "gin"):                       # MPNN + GEANet and the same MPNN without it
        assert ("geaet", mpnn, None, True) in kinds and any(m.family == "mpnn" and m.mpnn == mpnn
                                                            for m in models.values())
    assert {m.attn for m in models.values() if m.family == "graphormer"} == {"softmax", "gfsa", "plaplacian", "agf"}
    assert {"pyg-gps-zinc", "pyg-gine-zinc"} <= set(suite.recipes)
    for name, model in models.items():  # the papers' ZINC encoding: 28 atom types, 4 bond types
        assert (model.node_encoder, model.node_in, model.node_vocab) == ("embedding", 1, 28), name
        assert model.edge_encoder == "none" or (model.edge_in, model.edge_vocab) == (1, 4), name
        if not name.startswith("pyg-"):  # tuned recipes say so; the peers keep PyG's example settings
            recipe = load_recipe(name)
            assert "10-minute CPU budget" in recipe.description and recipe.optim.horizon == "time", name
    assert load_recipe("pyg-gps-zinc").optim.schedule == "plateau"


def test_peptides_and_tree_suites():
    pep = suites.get_suite("peptides-func-cpu-30min")
    assert (pep.max_time, pep.jobs, pep.threads) == (30, 2, 1)
    assert [load_recipe(r).data.name for r in pep.recipes] == ["peptides-func"] * 3
    tree = suites.get_suite("tree-depth-cpu")
    assert tree.plot == "depth" and (tree.jobs, tree.threads) == (2, 1)
    assert load_recipe("geaet-tree-r4", tree.overrides).optim.horizon == "time"  # the cosine fits the cap
    assert sorted({int(r.rsplit("-r", 1)[1]) for r in tree.recipes}) == [2, 3, 4, 5, 6]
    assert {r.rsplit("-tree", 1)[0] for r in tree.recipes} == set(suites.TREE_MODELS)
    for name in tree.recipes:  # every recipe exists, measures training accuracy; r = 5, 6 on subsets of the data
        recipe = load_recipe(name, tree.overrides_of(name))
        depth = int(name.rsplit("-r", 1)[1])
        assert recipe.trainer.eval_train and recipe.data.name == f"tree-r{depth}", name
        assert recipe.data.subset == {5: 16384, 6: 8192}.get(depth), name
        assert recipe.optim.horizon == "time", name
    # At most about two hours on 2 cores (the tree sweep three): ceil(runs / jobs) caps.
    for suite, hours in ((pep, 2), (tree, 3)):
        runs, _ = suite.size()
        assert math.ceil(runs / suite.jobs) * suite.max_time <= hours * 60, suite.name


def test_cli_suite_passes_jobs_threads_and_cap(monkeypatch, tmp_path):
    seen = {}

    def fake_bench(recipes, out, **kwargs):
        seen.update(kwargs, recipes=list(recipes))
        Path(out).mkdir(parents=True, exist_ok=True)
        runner.write_reports([], Path(out))
        return []

    monkeypatch.setattr(runner, "run_bench", fake_bench)
    assert main(["bench", "--suite", "zinc-cpu-10min", "--out", str(tmp_path / "z")]) == 0
    assert (seen["jobs"], seen["threads"], seen["max_time"], seen["seeds"]) == (2, 1, 10, (0, 1))
    assert seen["command"] == f"gea-graph bench --suite zinc-cpu-10min --out {tmp_path / 'z'}"
    assert main(["bench", "--suite", "zinc-cpu-10min", "--jobs", "1", "--threads", "2", "--out", str(tmp_path)]) == 0
    assert (seen["jobs"], seen["threads"]) == (1, 2)


# -- parallel runs ------------------------------------------------------------------------------------------------

# A stand-in for `gea-graph train`: announces itself, waits (up to 60 s) until the other run has started too, then
# writes a result. One run at a time would never see the other's mark and would fail.
WAIT_FOR_OTHER = """
import json, os, sys, time
run_dir, other = sys.argv[1], sys.argv[2]
os.makedirs(run_dir, exist_ok=True)
open(os.path.join(run_dir, "started"), "w").close()
deadline = time.time() + 60
while not os.path.exists(os.path.join(other, "started")):
    if time.time() > deadline:
        sys.exit(3)
    time.sleep(0.05)
json.dump({"recipe": "fake", "dataset": "x", "seed": 0, "params": 1, "metric": "mae", "higher_is_better": False,
           "epochs": 1, "best_epoch": 0, "val": 1.0, "test": 1.0, "train_time_s": 0.0, "peak_memory_mb": 0.0,
           "threads": os.environ.get("OMP_NUM_THREADS")}, open(os.path.join(run_dir, "result.json"), "w"))
"""


def test_jobs_2_runs_two_processes_at_once(tmp_path, monkeypatch):
    recipe = _recipe(tmp_path, "fake")
    out = tmp_path / "bench"
    dirs = {0: out / "fake" / "seed0", 1: out / "fake" / "seed1"}

    def command(run, overrides, max_time, trainer_args, stop_after=None):
        assert trainer_args[-2:] == ["--threads", "1"] and max_time == 0.5
        return [sys.executable, "-c", WAIT_FOR_OTHER, str(run.run_dir), str(dirs[1 - run.seed])]

    monkeypatch.setattr(runner, "train_command", command)
    messages: list[str] = []
    runs = runner.run_bench([str(recipe)], out, seeds=[0, 1], max_time=0.5, jobs=2, threads=1,
                            command="gea-graph bench ...", log=messages.append, poll=0.05)
    # The shared dataset is prepared once, before the two runs start.
    assert [m for m in messages if m.startswith("preparing")] == ["preparing FakeDataset (pe: none)"]
    assert all(r.result is not None and r.result["threads"] == "1" for r in runs)
    info = json.loads((out / "bench.json").read_text())
    assert (info["jobs"], info["threads"], info["max_time_min"], info["command"]) == (2, 1, 0.5, "gea-graph bench ...")
    assert info["machine"]["cores"] and info["invocations"][0]["end"] and info["invocations"][0]["load_average"]
    assert (dirs[0] / "train.log").is_file()  # parallel runs write their output to the run folder


def test_jobs_2_gives_the_results_of_one_run_at_a_time(tmp_path):
    # Two real training processes at once give what each run gives alone (here: trained in this process, one thread).
    import torch

    recipe_path = _recipe(tmp_path, "fake")
    runs = runner.run_bench([str(recipe_path)], tmp_path / "parallel", seeds=[0, 1], jobs=2, threads=1,
                            trainer_args=["--accelerator", "cpu"], log=lambda _: None, poll=0.1)
    recipe = load_recipe(recipe_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = [fit(recipe, tmp_path / f"alone{seed}", seed=seed, accelerator="cpu", progress=False, verbose=False)
                 for seed in (0, 1)]
    finally:
        torch.set_num_threads(threads)
    keys = ("seed", "params", "epochs", "best_epoch", "val", "test")
    assert [{k: r.result[k] for k in keys} for r in runs] == [{k: a[k] for k in keys} for a in alone]


def test_bad_jobs_and_threads_are_refused(tmp_path):
    recipe = _recipe(tmp_path, "fake")
    with pytest.raises(ValueError, match="jobs: 0 is not allowed; it must be an integer in \\[1, "):
        runner.run_bench([str(recipe)], tmp_path, jobs=0)
    with pytest.raises(ValueError, match="threads: 0 is not allowed; it must be an integer in \\[1, "):
        runner.run_bench([str(recipe)], tmp_path, threads=0)


# -- the time-horizon cosine --------------------------------------------------------------------------------------


def test_cosine_over_time_factor():
    used = iter([0.0, 0.5, 1.0, 1.7])
    factor = cosine_over_time(lambda: next(used))
    assert [round(factor(0), 6) for _ in range(4)] == [1.0, 0.5, 0.0, 0.0]


def test_time_horizon_decays_within_the_cap_and_needs_one(tmp_path):
    raw = dict(FAKE, optim={"lr": 0.01, "schedule": "cosine", "horizon": "time"},
               trainer=dict(FAKE["trainer"], max_epochs=3))
    recipe = load_recipe(_recipe(tmp_path, "timed", raw))
    fit(recipe, tmp_path / "run", max_time=5, accelerator="cpu", progress=False, verbose=False)
    with open(tmp_path / "run" / "metrics.csv") as f:
        lrs = [float(r["lr"]) for r in csv.DictReader(f)]
    # 3 epochs end the run long before the 5-minute cap: the cosine runs over the steps of those 3 epochs instead,
    # reaching 0 at the last step (the rate of a row is read after its epoch's last step).
    assert lrs == pytest.approx([0.01 * 0.75, 0.01 * 0.25, 0.0], abs=1e-6)
    with pytest.raises(ValueError, match="needs a wall-clock cap"):
        fit(recipe, tmp_path / "uncapped", accelerator="cpu", progress=False, verbose=False)
    with pytest.raises(ValueError, match="optim.horizon: time is a cosine without warm-up"):
        load_recipe(_recipe(tmp_path, "bad", dict(raw, optim={"schedule": "plateau", "horizon": "time"})))


# -- scripts/make_results.py --------------------------------------------------------------------------------------


def _make_results():
    spec = importlib.util.spec_from_file_location("make_results", ROOT / "scripts" / "make_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _fake_bench(tmp_path: Path, out: Path, tests: dict[str, list[float]], command: str, gpu: str | None = None,
                higher: bool = False, commits: tuple[str, ...] = (), trains: dict[str, list[float]] | None = None,
                fields: dict[str, dict] | None = None) -> None:
    runs = []
    for name, values in tests.items():
        path = _recipe(tmp_path, name)
        for seed, test in enumerate(values):
            (run,) = runner.plan([str(path)], [seed], out)
            run.run_dir.mkdir(parents=True)
            train = {"train": trains[name][seed]} if name in (trains or {}) else {}  # trainer.eval_train's
            (run.run_dir / "result.json").write_text(json.dumps({
                "recipe": name, "dataset": "zinc", "seed": seed, "params": 1000, "metric": "ap" if higher else "mae",
                "higher_is_better": higher, "epochs": 40, "best_epoch": 38, "val": test, "test": test,
                "train_time_s": 600.0, "peak_memory_mb": 300.0, **train, **(fields or {}).get(name, {})}))
            (run.run_dir / "recipe.yaml").write_text(yaml.safe_dump({"description": f"{name} recipe"}))
            runs.append(run)
    runner.write_reports(runs, out)
    info = runner.bench_info(runner.read_bench_json(out), command, 2, 1, 10.0, [])
    info["machine"]["gpu"] = gpu
    info["invocations"].append({"start": "2026-11-23 20:00 UTC", "end": "2026-11-23 22:30 UTC",
                                "load_average": [2.1, 2.3]})
    info["invocations"] += [{"start": "2026-11-24 01:00 UTC", "end": "2026-11-24 02:00 UTC", "load_average": [2.0],
                             "commit": commit} for commit in commits]  # a bench resumed on later commits
    (out / "bench.json").write_text(json.dumps(info))


def test_make_results_writes_the_page_from_bench_folders(tmp_path):
    zinc = tmp_path / "runs" / "zinc-cpu-10min"
    _fake_bench(tmp_path, zinc, {"geaet-zinc-cpu": [0.078, 0.080], "pyg-gps-zinc": [0.19, 0.20],
                                 "gcn-geanet-zinc-cpu": [0.20, 0.22], "gcn-zinc-cpu": [0.30, 0.32],
                                 "gin-zinc-cpu": [0.50]},  # seed 1 of the suite's 0, 1 not run
                "gea-graph bench --suite zinc-cpu-10min", commits=("aaa1111", "bbb2222", "bbb2222"))
    gpu = tmp_path / "runs" / "gpu"
    _fake_bench(tmp_path, gpu, {"gcn-geanet-peptides-func": [0.69, 0.70]},
                "gea-graph bench --recipes gcn-geanet-peptides-func --seeds 0,1", gpu="NVIDIA H100", higher=True)
    tree = tmp_path / "runs" / "tree"
    _fake_bench(tmp_path, tree, {"gcn-tree-r2": [0.9, 1.0], "gcn-tree-r3": [0.5, 0.5]},
                "gea-graph bench --suite tree-depth-cpu", higher=True, trains={"gcn-tree-r2": [1.0, 0.98]})
    page = tmp_path / "docs" / "results.md"
    assert _make_results().main([str(zinc), str(gpu), str(tree), "--out", str(page)]) == 0
    text = page.read_text()
    zinc_part = text.split("## ZINC")[1].split("\n## ")[0]
    order = [line.split("|")[2].strip() for line in zinc_part.splitlines()
             if line.startswith(("| 1 ", "| 2 ", "| 3 ", "| 4 "))]
    assert order == ["geaet-zinc-cpu", "pyg-gps-zinc (PyG peer)", "gcn-geanet-zinc-cpu", "gcn-zinc-cpu"]
    assert "0.0790 ± 0.0010" in zinc_part and "40/40" in zinc_part
    assert "best recipe geaet-zinc-cpu: test MAE 0.0790 (met: ≤ 0.080)" in zinc_part
    assert "2.47× (met: ≥ 2×)" in zinc_part and "GEANet better at equal time" in zinc_part
    assert "`gea-graph bench --suite zinc-cpu-10min`" in zinc_part and "runs at a time: 2" in zinc_part
    assert "gea-graph commits aaa1111, bbb2222\n" in zinc_part  # each commit the resumed bench ran on, once
    assert "torch threads per run: 1" in zinc_part and "load average" in zinc_part and "cores" in zinc_part
    assert "(results/zinc-cpu-10min-curves.png)" in zinc_part
    assert (page.parent / "results" / "zinc-cpu-10min-curves.png").is_file()
    assert text.count("Not yet measured.") == 1  # the Peptides-func section
    # the suite's runs without a complete run, in the suite's order: whole recipes by name, a partial one by its seeds
    assert ("Not yet measured: gps-zinc-cpu, geaet-gfsa-zinc-cpu, gatedgcn-geanet-zinc-cpu, gatedgcn-zinc-cpu, "
            "gin-geanet-zinc-cpu, gin-zinc-cpu (seed 1), graphormer-zinc-cpu, ") in zinc_part
    assert "pyg-gine-zinc (in the suite; rerunning its command below skips the complete runs" in zinc_part
    # test and train accuracy by depth (r=3 was run without the train pass: –); the suite's other depths named
    assert ("| model | accuracy | r=2 | r=3 |\n|---|---|---:|---:|\n| gcn | test | 0.9500 ± 0.0500 | 0.5000 ± 0.0000 |"
            "\n| gcn | train | 0.9900 ± 0.0100 | – |\n") in text
    # every recipe of the suite without a run is named (the other models at r=2, 3 and every model at r=4..6)
    assert "Not yet measured: geaet-tree-r2, geaet-tree-r3, geaet-tree-r4, geaet-tree-r5, geaet-tree-r6, " \
           "gcn-tree-r4, gcn-tree-r5, gcn-tree-r6," in text
    # the bench's own tables: a train column, and train_metric in results.csv (empty without the pass)
    assert "| gcn-tree-r2 | 1,000 | 2 | 40 | 0.9900 ± 0.0100 | 0.9500 ± 0.0500 |" in (tree / "results.md").read_text()
    assert "| gcn-tree-r3 | 1,000 | 2 | 40 | – | 0.5000 ± 0.0000 |" in (tree / "results.md").read_text()
    with open(tree / "results.csv", newline="") as f:
        assert [row["train_metric"] for row in csv.DictReader(f)] == ["1.0", "0.98", "", ""]
    gpu_part = text.split("## GPU reproductions")[1]
    assert "on NVIDIA H100" in gpu_part and "0.6950 ± 0.0050" in gpu_part
    queue = text.split("## GPU reproduction queue")[1].split("## GPU reproductions")[0]
    assert queue.index("gcn-geanet-peptides-func") < queue.index("geaet-zinc") < queue.index("graphormer-gfsa-zinc")
    assert "4.5 s an epoch each" in queue and "AP 0.6912 ± 0.0012" in queue
    assert "| status |" in queue and "not started |" in queue


def test_make_results_checks_the_peptides_goals(tmp_path):
    # issue 22: GEAET's fewest epochs against 9, each recipe's largest peak memory against 3 GiB
    out = tmp_path / "runs" / "peptides-func-cpu-30min"
    _fake_bench(tmp_path, out, {"gcn-peptides-func-cpu": [0.55, 0.56], "geaet-peptides-func-cpu": [0.45, 0.46]},
                "gea-graph bench --suite peptides-func-cpu-30min", higher=True,
                fields={"geaet-peptides-func-cpu": {"epochs": 8, "peak_memory_mb": 3500.0}})
    page = tmp_path / "docs" / "results.md"
    assert _make_results().main([str(out), "--out", str(page)]) == 0
    part = page.read_text().split("## Peptides-func")[1].split("\n## ")[0]
    assert ("- geaet-peptides-func-cpu: 8 epochs in the budget, the fewest of its runs (not met: ≥ 9, three times "
            "the 3 of the issue)") in part
    assert "- gcn-peptides-func-cpu: peak memory 300 MiB, the largest of its runs (met: ≤ 3,072 MiB)" in part
    assert "- geaet-peptides-func-cpu: peak memory 3,500 MiB, the largest of its runs (not met: ≤ 3,072 MiB)" in part


def test_the_committed_bench_folders_give_the_committed_page(tmp_path):
    # docs/results.md regenerated from docs/results/runs/ gives the same tables, line for line; the page says which
    # folders hold runs older than per-run records (their settings are recorded once per bench).
    command = next(line for line in (ROOT / "docs" / "results.md").read_text().splitlines()
                   if line.startswith("python scripts/make_results.py "))
    words = command.split()[2:]
    folders = [ROOT / word for i, word in enumerate(words)  # bench folders; a sweep folder follows --sweep
               if word != "--sweep" and (i == 0 or words[i - 1] != "--sweep")]
    page = tmp_path / "docs" / "results.md"
    make_results = _make_results()
    argv = [word if word == "--sweep" else str(ROOT / word) for word in words]
    assert make_results.main([*argv, "--out", str(page)]) == 0
    tables = [[line for line in text.splitlines() if line.startswith("|")]
              for text in (page.read_text(), (ROOT / "docs" / "results.md").read_text())]
    assert tables[0] == tables[1] and len(tables[0]) > 30
    benches = [make_results.read_bench(folder) for folder in folders]
    older = sum(1 for bench in benches if bench.runs and not all(run["record"] for run in bench.runs))
    assert len(folders) == 3 and page.read_text().count("this bench.json predates per-run records") == older


def test_committed_results_page_has_the_scripts_structure():
    # docs/results.md is written by the script: every section of it, the queue and the command that wrote it.
    text = (ROOT / "docs" / "results.md").read_text()
    for section in _make_results().SECTIONS:
        assert f"## {section.title}" in text
    assert "## GPU reproduction queue" in text and "python scripts/make_results.py" in text
    assert "[docs/results.md](docs/results.md)" in (ROOT / "README.md").read_text()


def test_the_committed_tree_sweep_is_complete_and_resumes_with_nothing_to_train(tmp_path, monkeypatch, capsys):
    # `gea-graph bench --suite tree-depth-cpu` on a copy of the committed folder (r = 5, 6 made on c9d0d5e over four
    # invocations, r = 2..4 rerun on 5dababe with the train pass): every run is complete, so each is skipped, not
    # refused, retrained or miscounted, and nothing starts.
    out = tmp_path / "tree-depth-cpu"
    shutil.copytree(ROOT / "docs" / "results" / "runs" / "tree-depth-cpu", out)
    before = {p: p.read_bytes() for p in out.glob("*/seed*/result.json")}
    suite = suites.SUITES["tree-depth-cpu"]
    assert {p.parent.parent.name for p in before} == set(suite.recipes)
    started = []

    def command(run, overrides, max_time, trainer_args, stop_after=None):
        started.append((run.key, tuple(overrides)))
        return [sys.executable, "-c", "raise SystemExit(3)"]

    monkeypatch.setattr(runner, "train_command", command)
    monkeypatch.setattr(runner, "prepare_data", lambda runs, log=print: None)  # the r = 5, 6 data is not built
    assert main(["bench", "--suite", "tree-depth-cpu", "--out", str(out), "--stop-after", "0"]) == 0
    printed = capsys.readouterr().out
    assert len(before) == 50 and printed.count("complete, skipped") == 50 and started == []
    assert {p: p.read_bytes() for p in out.glob("*/seed*/result.json")} == before
    info = json.loads((out / "bench.json").read_text())
    assert set(info["runs"]) == {f"{p.parent.parent.name}/{p.parent.name}" for p in before}  # a record each
    for recipe in ("gin-tree-r6", "gatedgcn-tree-r5"):  # the suite's own subset, recorded per run
        assert info["runs"][f"{recipe}/seed0"]["overrides"] == list(suite.overrides_of(recipe))
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(before)
    assert all(row["train_metric"] != "" for row in rows)  # the train pass, at every depth
    # one row per recipe (no variant split), train accuracy included
    table = (out / "results.md").read_text()
    assert "| gcn-tree-r4 | 7,216 | 2 | 44 | 0.0813 ± 0.0156 | 0.0796 ± 0.0129 | 0.0796 ± 0.0129 | – |" in table
    assert (out / "tree-depth-cpu.png").is_file()


def test_the_page_names_each_machine_of_a_bench_and_the_runs_it_trained():
    # A capped run's epochs depend on the machine: a bench resumed elsewhere lists its machines by invocation, with
    # the runs each trained; invocations from before the per-invocation record say so.
    mr = _make_results()
    intel = {"cpu": "Intel Xeon", "cores": 2, "gpu": None, "platform": "Linux"}
    amd = runner.device_label({"cpu": "AMD EPYC", "cores": 2})
    bench = mr.Bench(Path("b"), {}, [{"recipe": "a", "record": {"devices": [amd]}},
                                     {"recipe": "b", "record": {"devices": [runner.device_label(intel)]}},
                                     {"recipe": "c", "record": None}])
    sessions = [{}, {"device": amd}, {"device": amd}, {"device": runner.device_label(intel)}]
    assert mr._machine_line(bench, intel, sessions) == (
        "- machines: not recorded for invocation 1 (made before each invocation recorded its machine); "
        "AMD EPYC, 2 cores for invocations 2, 3 (runs of a); Intel Xeon, 2 cores for invocation 4 (runs of b); "
        "Linux (the last invocation's platform)")
    assert mr._machine_line(bench, intel, sessions[-1:]) == "- machine: Intel Xeon, 2 cores; Linux"


def test_the_page_says_what_a_commit_of_the_bench_did_differently_until_it_is_rerun(monkeypatch):
    # A difference found after the runs is said under every bench with an invocation of that commit, no other.
    mr = _make_results()
    monkeypatch.setattr(mr, "COMMIT_NOTES", {"abc1234": "the cap ran late"})

    def page_of(*commits):
        info = {"machine": {"cores": 2}, "invocations": [{"commit": c, "start": "s", "end": "e"} for c in commits]}
        return mr.how_it_ran(mr.Bench(Path("b"), info, []), Path("docs/results.md"))

    assert page_of("abc1234", "def5678", "abc1234").count("- made on commit abc1234: the cap ran late") == 1
    assert not [line for line in page_of("def5678") if "made on commit" in line]


def test_results_page_epochs_column_names_the_plan_once_when_every_run_was_cut():
    column = _make_results().epochs_column
    cut = {"cut_by_time_cap": True, "epochs_planned": 1000}
    assert column([{"epochs": 28, **cut}, {"epochs": 27, **cut}]) == "28/27 of 1000\\*"
    assert column([{"epochs": 2, "cut_by_time_cap": True, "epochs_planned": 8}, {"epochs": 8, "epochs_planned": 8}]) \
        == "2 of 8\\*/8"
    assert column([{"epochs": 8}, {"epochs": 8}]) == "8/8"
