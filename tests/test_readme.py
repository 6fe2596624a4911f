"""The README's promises: its Python example runs as printed, and the commands it names exist."""

from __future__ import annotations

import json
import math
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_model_example_trains_and_loss_falls(mirror, data_root, tmp_path, monkeypatch, capsys):
    example = _blocks("python")[0]
    script = tmp_path / "example.py"
    script.write_text(example)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    losses = [float(m) for m in re.findall(r"train MAE (\d+\.\d+)", capsys.readouterr().out)]
    assert len(losses) == 4
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]  # 20 AdamW steps on real ZINC reduce the L1 loss


def test_readme_commands_name_real_subcommands_and_recipes():
    from gea_graph.cli import SUBCOMMANDS

    recipes = {p.stem for p in (README.parent / "models").glob("*.yaml")}
    commands = [line.split("&& ")[-1] for block in _blocks("bash") for line in block.splitlines()
                if line.split("&& ")[-1].startswith("gea-graph ")]
    assert any(line.startswith("gea-graph bench --recipes geaet-zinc-quick") for line in commands)
    for line in commands:
        words = shlex.split(line.split("#")[0].replace("[", "").replace("]", ""))
        assert words[1] in SUBCOMMANDS, line
        if words[1] in ("train", "info"):
            assert words[2] in recipes, line
        if "--recipes" in words:
            assert set(words[words.index("--recipes") + 1].split(",")) <= recipes, line


def quick_start() -> list[str]:
    """The commands of the README's quick start, in order (one per ``bash`` block of that section)."""
    text = README.read_text()
    section = text[text.index("## Quick start"):text.index("\n## ", text.index("## Quick start") + 1)]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)]


def test_quick_start_is_two_commands_and_ci_runs_the_second_exactly():
    # Issue 49, R11: the first installs and runs the main job, the second installs what the tests add and runs them
    first, second = quick_start()  # exactly two
    assert "\n" not in first and "\n" not in second
    assert first.startswith("pip install torch==") and "pip install -e ." in first
    assert "gea-graph bench --recipes geaet-zinc-quick" in first
    assert second.endswith("python3 -m pytest -q -n 2") and "[dev]" in second
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert second in ci  # a line of its own: the command, exactly
    assert "gea-graph bench" not in "\n".join(ci)  # CI runs the tests, not the main job


def test_quick_start_main_job_options_are_what_the_bench_takes():
    # the guarded feature: the main job's words parse as a bench command (recipe, seeds, threads, cap)
    from gea_graph.cli import build_parser

    job = quick_start()[0].split("&& ")[-1]
    words = shlex.split(job)
    assert words[0] == "gea-graph"
    args = build_parser().parse_args(words[1:])
    assert args.recipes == ["geaet-zinc-quick"] and args.seeds == [0] and args.threads == 1 and args.max_time == 10


@pytest.fixture(scope="module")
def quick_checkpoint(tmp_path_factory) -> Path:
    """``runs/quick/checkpoints/best.ckpt`` of the README: the geaet-zinc-quick model in a training checkpoint's
    format (freshly initialised: the examples show how to use a model, not how good it is)."""
    import torch

    from gea_graph.train import GraphTask, load_recipe
    from gea_graph.train.checkpoint import RECORD_KEY, checkpoint_record, save_checkpoint

    recipe = load_recipe("geaet-zinc-quick")
    torch.manual_seed(0)
    task = GraphTask(recipe.to_dict())
    path = tmp_path_factory.mktemp("readme") / "runs" / "quick" / "checkpoints" / "best.ckpt"
    save_checkpoint({"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict(),
                     RECORD_KEY: checkpoint_record(recipe)}, path)
    return path


def test_readme_use_a_trained_model(mirror, quick_checkpoint, shared_data_root, tmp_path, monkeypatch, capsys):
    example = _blocks("python")[1]
    assert example.startswith("import gea_graph")
    monkeypatch.chdir(quick_checkpoint.parents[3])
    monkeypatch.setenv("GEA_GRAPH_DATA", str(shared_data_root))
    runpy.run_path(str(_write(tmp_path / "use.py", example)), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "graph_regression ['score']"
    assert lines[1].startswith("CCO ") and lines[2].startswith("c1ccccc1O ")
    assert lines[3].startswith("C[Si](C)(C)C        nan  outside the model's vocabulary (ZINC's 28 atom and 4 bond "
                               "types, encoded as in Benchmarking-GNNs): atom 1 ([Si]")
    assert lines[4].startswith("1000 test molecules, first ")


def test_readme_exported_model_runs_with_torch_and_pyg_alone(quick_checkpoint, tmp_path):
    """The README's block runs in a fresh interpreter in which ``import gea_graph`` fails, and prints the
    predictions gea-graph makes for the same molecules."""
    import gea_graph
    from gea_graph.inference.export import check_replay, export_model, save_export

    example = _blocks("python")[2]
    trained = gea_graph.load_model(quick_checkpoint)
    program, metadata = export_model(trained)
    check_replay(program, trained, [i["name"] for i in metadata["inputs"]])
    save_export(program, metadata, tmp_path / "model.pt2")
    script = _write(tmp_path / "exported.py", example)
    guard = ("import sys; sys.modules['gea_graph'] = None; import runpy; "
             f"runpy.run_path({str(script)!r}, run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", guard], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    names, values = done.stdout.strip().split(" ", 1)[0], done.stdout.strip().split(" ", 1)[1]
    assert names == "['score']"
    expected = trained.predict(["CCO", "CO"]).values
    assert [v for row in json.loads(values) for v in row] == pytest.approx(expected.reshape(-1).tolist(),
                                                                            rel=1e-4, abs=1e-5)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _options_of(command: str) -> set[str]:
    from gea_graph.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    found = {s for a in sub._actions for s in a.option_strings}
    for action in sub._actions:  # `data prepare`, `data list`: the options of its actions too
        if isinstance(action.choices, dict):
            found |= {s for child in action.choices.values() for a in child._actions for s in a.option_strings}
    return found


def test_every_option_of_a_documented_command_exists():
    # A command copied from the README or docs/ must not stop at "unrecognized arguments".
    texts = [README.read_text(), *(p.read_text() for p in sorted((README.parent / "docs").glob("*.md")))]
    lines = [line.strip() for text in texts for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
             for line in block.replace("\\\n", " ").splitlines()]
    checked = 0
    for line in lines:
        tail = line[line.index("gea-graph "):] if "gea-graph " in line else ""
        if not tail:
            continue
        words = shlex.split(tail.split(" #")[0].replace("[", "").replace("]", ""))
        if len(words) < 2 or words[1].startswith("-"):
            continue
        options = {w.split("=")[0] for w in words[2:] if w.startswith("--")}
        assert options <= _options_of(words[1]), (line, sorted(options - _options_of(words[1])))
        checked += 1
    assert checked >= 20
