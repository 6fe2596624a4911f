"""Issue 23 for `gea-graph train`: a planted lock link is refused and its target kept (D1), a checkpoint that cannot
be written is one line and the run resumes (D9), run files get the umask's permissions (D12)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gea_graph.cli import main
from gea_graph.train import read_result
from gea_graph.train.lock import run_lock

REPO = Path(__file__).resolve().parents[2]
FAKE = {
    "data": {"cls": "torch_geometric.datasets.FakeDataset",
             "options": {"num_graphs": 24, "avg_num_nodes": 5, "num_channels": 4, "edge_dim": 2, "num_classes": 3}},
    "model": {"family": "mpnn", "mpnn": "gine", "task": "graph_classification", "out_channels": 3, "hidden": 8,
              "layers": 1, "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2},
    "trainer": {"max_epochs": 1, "batch_size": 8, "seeds": [0]},
}


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-fake.yaml"
    path.write_text(yaml.safe_dump(FAKE))
    return path


def train(recipe: Path, out: Path, *more: str) -> int:
    return main(["train", str(recipe), "--out", str(out), "--accelerator", "cpu", "--devices", "1", "--no-progress",
                 *more])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "foreign file"])
def test_a_planted_lock_is_refused_and_never_emptied(recipe, tmp_path, capsys, plant):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data")
    out = tmp_path / "run"
    out.mkdir()
    lock = out / ".lock"
    if plant == "symlink":
        lock.symlink_to(victim)
        expected = ".lock is a symbolic link"
    elif plant == "hardlink":
        os.link(victim, lock)
        expected = ".lock is a hard link to another file"
    else:
        lock.write_text("a user's notes, not a lock\n")
        expected = ".lock is not a gea-graph lock file"
    assert train(recipe, out) == 2
    assert expected in one_error_line(capsys)
    assert victim.read_text() == "precious data"
    assert not (out / "recipe.yaml").exists()
    if plant == "foreign file":
        assert lock.read_text() == "a user's notes, not a lock\n"

    lock.unlink()  # the guarded feature: a run trains, and its lock keeps a second process out
    assert train(recipe, out) == 0 and read_result(out)["epochs"] == 1
    with run_lock(out):
        assert train(recipe, out, "--resume") == 2
    assert f"is in use by pid {os.getpid()}" in one_error_line(capsys)


def test_links_planted_in_the_run_folder_are_not_written_through(recipe, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data")
    out = tmp_path / "run"
    (out / "logs").mkdir(parents=True)
    for name in ("recipe.yaml", "metrics.csv", "result.json", "logs/metrics.csv", "logs/hparams.yaml"):
        (out / name).symlink_to(victim)
    assert train(recipe, out) == 0
    assert victim.read_text() == "precious data"
    assert not (out / "result.json").is_symlink() and read_result(out)["epochs"] == 1
    assert "val/metric" in (out / "logs" / "metrics.csv").read_text()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = tmp_path / "run2"
    other.mkdir()
    (other / "checkpoints").symlink_to(elsewhere)  # would send the checkpoints out of the run folder
    assert train(recipe, other) == 2
    assert "checkpoints is a symbolic link" in one_error_line(capsys)
    assert not any(elsewhere.iterdir())


def test_a_checkpoint_that_cannot_be_written_is_one_line_and_the_run_resumes(recipe, tmp_path):
    out = tmp_path / "run"
    # A file-size limit fails the checkpoint's write as a full disk would (the small files fit under it).
    limited = ("import resource, signal, sys\n"
               "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               "resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))\n"
               "from gea_graph.cli import main\n"
               "sys.exit(main(sys.argv[1:]))\n")
    argv = ["train", str(recipe), "--out", str(out), "--accelerator", "cpu", "--devices", "1", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", limited, *argv], check=False, capture_output=True, text=True, env=env,
                          timeout=600)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert err[-1].startswith("gea-graph train: error: could not write the checkpoint "), err[-1]
    assert "continue with --resume" in err[-1] and "Traceback" not in proc.stderr
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]  # no half-written checkpoint left
    assert not (out / "result.json").exists()

    resumed = subprocess.run([sys.executable, "-m", "gea_graph", *argv, "--resume"], check=False, capture_output=True,
                             text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "result.json").read_text())["epochs"] == 1


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_run_files_get_the_permissions_of_the_umask(recipe, tmp_path, umask):
    out = tmp_path / "run"
    before = os.umask(umask)
    try:
        assert train(recipe, out) == 0
    finally:
        os.umask(before)
    files = [out / "recipe.yaml", out / "metrics.csv", out / "result.json", out / "checkpoints" / "last.ckpt",
             out / "checkpoints" / "best.ckpt", out / "logs" / "metrics.csv", out / ".lock"]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o666 & ~umask for p in files}
    folders = [out, out / "checkpoints", out / "logs"]
    assert {str(p): stat.S_IMODE(p.stat().st_mode) for p in folders} == {str(p): 0o777 & ~umask for p in folders}


def test_a_resume_into_its_own_folder_warns_only_with_verbose(recipe, tmp_path, capsys):
    # Lightning warns that the checkpoints folder "exists and is not empty": on --resume it holds the run's own
    # checkpoints, as intended, and the warning only alarmed the user; --verbose shows Lightning's warnings again.
    import warnings

    out = tmp_path / "run"
    assert train(recipe, out) == 0, capsys.readouterr().err
    for more, expected in (((), False), (("--verbose",), True)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert train(recipe, out, "--resume", *more) == 0, capsys.readouterr().err
        shown = [str(w.message) for w in seen if "exists and is not empty" in str(w.message)]
        assert bool(shown) is expected, (more, shown)
        assert all(m.startswith("Checkpoint directory ") and "checkpoints exists" in m for m in shown)


def test_the_files_count_epochs_from_0_and_the_console_from_1_as_the_design_says(recipe, tmp_path, capsys):
    # result.json's best_epoch and metrics.csv's epoch are Lightning's 0-based index (other tools read them), while
    # the console counts from 1; users read the files, so docs/design.md says so
    out = tmp_path / "run"
    assert train(recipe, out, "trainer.max_epochs=2") == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    result = json.loads((out / "result.json").read_text())
    epochs = [row.split(",")[0] for row in (out / "metrics.csv").read_text().splitlines()[1:]]
    assert epochs == ["0", "1"] and result["best_epoch"] in (0, 1)
    assert f"best epoch {result['best_epoch'] + 1}, val " in printed
    design = " ".join((REPO / "docs" / "design.md").read_text().split())
    assert ("`best_epoch` (`result.json`), `epoch` (`metrics.csv`) and `best_val_epoch` (bench's `results.csv`) are "
            "Lightning's 0-based epoch index") in design
