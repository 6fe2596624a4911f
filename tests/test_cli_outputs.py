"""Outputs never replace inputs (issue 49, R4): ``--out``, ``--embeddings``, ``--ogb-submission`` and the files of a
run or bench folder refuse any input of the same command (checkpoint, CSV, recipe) and one another, in one line, before
anything is read or written; distinct outputs still work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gea_graph.cli import main

SMILES = [f"{'C' * n}{end}" for end in ("O", "N") for n in range(1, 21)]  # 40 distinct molecules


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """A one-epoch model trained by ``gea-graph train`` on a 40-molecule CSV: its checkpoint, the CSV, the recipe."""
    tmp = tmp_path_factory.mktemp("outputs")
    csv = tmp / "mols.csv"
    csv.write_text("smiles,y\n" + "".join(f"{s},{i % 7 / 7:.3f}\n" for i, s in enumerate(SMILES)))
    recipe = {"data": {"csv": str(csv), "root": str(tmp / "data"),
                       "options": {"smiles_column": "smiles", "target_columns": "y"}},
              "model": {"family": "geaet", "task": "graph_regression", "out_channels": 1, "hidden": 8, "layers": 1},
              "trainer": {"max_epochs": 1, "seeds": [0], "batch_size": 8}}
    (tmp / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert main(["train", str(tmp / "recipe.yaml"), "--out", str(tmp / "run"), "--no-progress"]) == 0
    return {"tmp": tmp, "ckpt": tmp / "run" / "checkpoints" / "best.ckpt", "csv": csv, "recipe": tmp / "recipe.yaml"}


def _refused(argv: list[str], capsys, expected: str) -> None:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err, err


def test_predict_out_on_its_checkpoint_is_refused_and_the_checkpoint_kept(trained):
    # the reproduction, exactly: `gea-graph predict CK --smiles CCO --out CK`
    ckpt = trained["ckpt"]
    before = ckpt.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "gea_graph", "predict", str(ckpt), "--smiles", "CCO", "--out",
                           str(ckpt)], capture_output=True, text=True, env=dict(os.environ), check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "--out" in proc.stderr and "is the checkpoint" in proc.stderr and "never replaces an input" in proc.stderr
    assert ckpt.read_bytes() == before


def test_every_writing_command_follows_the_rule(trained, capsys, tmp_path):
    ckpt, csv, tmp = trained["ckpt"], trained["csv"], trained["tmp"]
    csv_before, ckpt_before = csv.read_bytes(), ckpt.read_bytes()
    link = tmp_path / "link.ckpt"
    link.symlink_to(ckpt)  # the checkpoint under another name, read through a link
    cases = [
        (["predict", ckpt, "--csv", csv, "--smiles-column", "smiles", "--out", csv], "--out"),
        (["predict", link, "--smiles", "CCO", "--out", ckpt], "is the checkpoint"),
        (["predict", link, "--smiles", "CCO", "--out", tmp_path / "x" / ".." / "link.ckpt"], "is the checkpoint"),
        (["predict", ckpt, "--smiles", "CCO", "--out", tmp_path / "p.csv", "--embeddings", tmp_path / "e.npy",
          "--out", tmp_path / "e.npy"], "--out"),
        (["predict", ckpt, "--smiles", "CCO", "--out", tmp_path / "x" / ".." / "e.npy", "--embeddings",
          tmp_path / "e.npy"], "two outputs cannot share a file"),
        (["train", trained["recipe"], "--out", tmp], "is the recipe"),  # its recipe.yaml is the run's
    ]
    for argv, expected in cases:
        _refused(argv, capsys, expected)
    assert csv.read_bytes() == csv_before and ckpt.read_bytes() == ckpt_before
    assert not (tmp_path / "e.npy").exists() and not (tmp_path / "p.csv").exists()
    # a copy of the checkpoint named like an output folder's file: diagnose refuses to write over it
    (tmp_path / "diag").mkdir()
    (tmp_path / "diag" / "layers.csv").write_bytes(ckpt_before)
    _refused(["diagnose", tmp_path / "diag" / "layers.csv", "--dataset", "zinc", "--out", tmp_path / "diag"], capsys,
             "is the checkpoint")


def test_distinct_outputs_still_predict(trained, capsys, tmp_path):
    out, emb = tmp_path / "preds.csv", tmp_path / "emb.npy"
    code = main(["predict", str(trained["ckpt"]), "--smiles", "CCO", "c1ccccc1O", "--out", str(out), "--embeddings",
                 str(emb)])
    assert code == 0, capsys.readouterr().err
    assert "2 predicted, 0 invalid" in capsys.readouterr().out
    assert out.read_text().splitlines()[0].startswith("row,smiles,y") and emb.stat().st_size > 0
