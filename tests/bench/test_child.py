"""Child processes (bench runs, perf's fresh processes, selfcheck's DDP run) import this process's gea_graph, the code
a bench's digest names, even when started from a folder that holds another gea_graph."""
import csv
import subprocess
import sys

import pytest
import yaml

import gea_graph
from gea_graph.bench.child import child_env, gea_graph_command, option_words
from gea_graph.cli import build_parser, main
from gea_graph.cli.bench import command_line

needs_safe_path = pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH needs Python >= 3.11")

WHICH = "import gea_graph; print(gea_graph.__file__)"


def _shadow(folder):
    # another gea_graph where `python -m` / `-c` would look first: importing it fails loudly
    (folder / "gea_graph").mkdir(parents=True)
    (folder / "gea_graph" / "__init__.py").write_text("raise ImportError('the shadow gea_graph of the cwd')\n")
    return folder


@needs_safe_path
def test_a_child_imports_this_gea_graph_not_the_one_in_its_cwd(tmp_path):
    cwd = _shadow(tmp_path / "elsewhere")
    trapped = subprocess.run([sys.executable, "-c", WHICH], cwd=cwd, capture_output=True, text=True, check=False)
    assert "the shadow gea_graph of the cwd" in trapped.stderr  # the trap, without child_env
    ours = subprocess.run([sys.executable, "-c", WHICH], cwd=cwd, capture_output=True, text=True, check=False,
                          env=child_env())
    assert ours.returncode == 0 and ours.stdout.strip() == gea_graph.__file__


def test_child_env_keeps_the_environment_and_puts_this_package_first():
    env = child_env({"PYTHONPATH": "/somewhere", "KEEP": "1"})
    top, rest = env["PYTHONPATH"].split(":", 1)
    assert gea_graph.__file__.startswith(top) and rest == "/somewhere"
    assert env["KEEP"] == "1" and env["PYTHONSAFEPATH"] == "1"
    assert gea_graph_command("train", "x") == [sys.executable, "-m", "gea_graph", "train", "x"]


def test_option_words_skip_unset_options_and_write_floats_short():
    assert option_words((("--max-time", 30.0), ("--seed", None), ("--jobs", 2), ("--x", 0.25)), ["a.b=1", "c=2"]) == [
        "--max-time", "30", "--jobs", "2", "--x", "0.25", "--set", "a.b=1", "--set", "c=2"]
    assert option_words(()) == []


def test_a_bench_records_its_command_as_typed():
    args = build_parser().parse_args(["bench", "--recipes", "geaet-zinc-quick", "--seeds", "0,1", "--max-time", "2.5",
                                      "--jobs", "2", "--set", "trainer.max_epochs=3", "--accelerator", "cpu"])
    assert command_line(args) == ("gea-graph bench --recipes geaet-zinc-quick --seeds 0,1 --max-time 2.5 --jobs 2 "
                                  "--set trainer.max_epochs=3 --accelerator cpu")


@needs_safe_path
def test_a_bench_started_beside_another_gea_graph_trains_with_its_own(tmp_path, monkeypatch):
    recipe = tmp_path / "tiny-fake.yaml"
    recipe.write_text(yaml.safe_dump({
        "data": {"cls": "torch_geometric.datasets.FakeDataset",
                 "options": {"num_graphs": 20, "avg_num_nodes": 5, "num_channels": 4, "num_classes": 2}},
        "model": {"family": "mpnn", "mpnn": "gin", "task": "graph_classification", "out_channels": 2, "hidden": 8,
                  "layers": 1, "node_encoder": "linear", "node_in": 4},
        "trainer": {"max_epochs": 1, "batch_size": 10, "seeds": [0]}}))
    monkeypatch.chdir(_shadow(tmp_path / "checkout"))
    out = tmp_path / "bench"
    assert main(["bench", "--recipes", str(recipe), "--out", str(out), "--accelerator", "cpu"]) == 0
    with open(out / "results.csv") as f:
        assert [row["recipe"] for row in csv.DictReader(f)] == ["tiny-fake"]
