"""The README's promises: its Python example runs as printed, and the commands it names exist."""

from __future__ import annotations

import math
import re
import runpy
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_model_example_trains_and_loss_falls(mirror, data_root, tmp_path, monkeypatch, capsys):
    (example,) = _blocks("python")
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
    commands = [line for block in _blocks("bash") for line in block.splitlines()
                if line.startswith("gea-graph ")]
    assert any(line.startswith("gea-graph bench --recipes geaet-zinc-quick") for line in commands)
    for line in commands:
        words = shlex.split(line.split("#")[0].replace("[", "").replace("]", ""))
        assert words[1] in SUBCOMMANDS, line
        if words[1] in ("train", "info"):
            assert words[2] in recipes, line
        if "--recipes" in words:
            assert set(words[words.index("--recipes") + 1].split(",")) <= recipes, line


@pytest.mark.parametrize("command", ["python3 -m pytest -q -n 2"])
def test_ci_runs_the_readme_test_command(command):
    assert command in _blocks("bash")[2]
    assert command in (README.parent / ".ci" / "run").read_text()
