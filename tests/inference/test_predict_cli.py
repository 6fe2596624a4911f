"""``gea-graph predict``: rows in input order, the error column and the summary line, CSV input in chunks, dataset
splits, ensembles (mean, std, individual columns, --bench), embeddings, --strict and clear errors."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import gea_graph
from gea_graph.cli import main

from .conftest import save_untrained

SMILES = ["Cc1c(I)cnn1C", "C[Si](C)(C)C", "CCO", "C1CC(N", "C", "c1ccccc1O"]


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def one_line(text: str) -> str:
    """The one line of a command's output, leaving out the renderings of the progress bar (on stderr)."""
    lines = [line for line in text.splitlines() if line.strip() and "mol/s" not in line and "s/mol" not in line]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def ckpt(zinc_run) -> Path:
    return zinc_run / "checkpoints" / "best.ckpt"


def test_smiles_rows_in_input_order_with_errors(ckpt, tmp_path, capsys):
    out = tmp_path / "preds.csv"
    assert main(["predict", str(ckpt), "--smiles", *SMILES, "--out", str(out)]) == 0
    assert one_line(capsys.readouterr().out).startswith("4 predicted, 2 invalid (wrote ")
    rows = read(out)
    assert list(rows[0]) == ["row", "smiles", "score", "error"]
    assert [r["row"] for r in rows] == [str(i) for i in range(6)] and [r["smiles"] for r in rows] == SMILES
    assert rows[1]["score"] == "" and "'Si'" in rows[1]["error"] and "vocabulary" in rows[1]["error"]
    assert rows[3]["score"] == "" and rows[3]["error"] == "RDKit cannot parse this SMILES"
    expected = gea_graph.load_model(ckpt).predict(SMILES).values[:, 0]
    got = np.array([float(r["score"]) if r["score"] else np.nan for r in rows])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_csv_in_chunks_keeps_ids_and_order(ckpt, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GEA_GRAPH_CHUNK_ROWS", "4")  # several chunks, an invalid row at a chunk's edge
    table = tmp_path / "molecules.csv"
    smiles = [*SMILES, "", "CC(=O)Nc1ccc(O)cc1", "CCN", "CCCl"]
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "smiles", "other"])
        writer.writerows([[f"mol-{i:02d}", s, "x"] for i, s in enumerate(smiles)])
    out = tmp_path / "preds.csv"
    argv = ["predict", str(ckpt), "--csv", str(table), "--smiles-column", "smiles", "--id-column", "name",
            "--out", str(out), "--batch-size", "3"]
    assert main(argv) == 0
    assert one_line(capsys.readouterr().out).startswith("7 predicted, 3 invalid")
    rows = read(out)
    assert [r["name"] for r in rows] == [f"mol-{i:02d}" for i in range(10)]
    assert rows[6]["error"] == "no SMILES (an empty cell)" and rows[6]["smiles"] == ""
    expected = gea_graph.load_model(ckpt).predict(smiles).values[:, 0]
    got = np.array([float(r["score"]) if r["score"] else np.nan for r in rows])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_dataset_split_equals_its_smiles(ckpt, data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GEA_GRAPH_DATA", str(data_dir))
    by_dataset, by_smiles = tmp_path / "d.csv", tmp_path / "s.csv"
    assert main(["predict", str(ckpt), "--dataset", "zinc", "--split", "val", "--out", str(by_dataset)]) == 0
    assert one_line(capsys.readouterr().out).startswith("1000 predicted, 0 invalid")
    rows = read(by_dataset)
    assert [r["row"] for r in rows[:3]] == ["0", "1", "2"] and all(r["smiles"] for r in rows)
    assert main(["predict", str(ckpt), "--smiles", *[r["smiles"] for r in rows[:50]], "--out", str(by_smiles)]) == 0
    np.testing.assert_allclose([float(r["score"]) for r in read(by_smiles)],
                               [float(r["score"]) for r in rows[:50]], rtol=1e-5, atol=1e-6)


def test_ensemble_mean_std_individual_and_embeddings(ckpt, tmp_path, capsys):
    other = save_untrained("geaet-zinc-quick", ["data.pe=lap:4", "model.pe.kind=lap", "model.pe.size=4",
                                                "model.pe.dim=4", "model.hidden=16", "model.layers=1"],
                           tmp_path / "other.ckpt")
    out, emb = tmp_path / "preds.csv", tmp_path / "emb.npy"
    argv = ["predict", str(ckpt), str(other), "--smiles", *SMILES, "--out", str(out), "--individual",
            "--embeddings", str(emb)]
    assert main(argv) == 0
    assert one_line(capsys.readouterr().out).startswith("4 predicted, 2 invalid")
    rows = read(out)
    assert list(rows[0]) == ["row", "smiles", "score", "score_std", "score_model0", "score_model1", "error"]
    each = np.stack([gea_graph.load_model(p).predict(SMILES).values[:, 0] for p in (ckpt, other)])
    for i, row in enumerate(rows):
        if not row["error"]:
            got = [float(row[k]) for k in ("score", "score_std", "score_model0", "score_model1")]
            np.testing.assert_allclose(got, [each[:, i].mean(), each[:, i].std(), *each[:, i]], rtol=1e-5,
                                       atol=1e-6)
        else:
            assert row["score"] == row["score_std"] == row["score_model0"] == ""
    vectors = np.load(emb)
    assert vectors.shape == (6, 2, 16) and vectors.dtype == np.float32
    assert np.isnan(vectors[[1, 3]]).all() and not np.isnan(vectors[[0, 2, 4, 5]]).any()
    np.testing.assert_allclose(vectors[:, 0], gea_graph.load_model(ckpt).embed(SMILES), rtol=1e-5, atol=1e-6,
                               equal_nan=True)


def test_bench_shortcut_takes_every_complete_seed(ckpt, tmp_path, capsys):
    bench = tmp_path / "bench"
    for seed, complete in ((0, True), (1, True), (2, False)):
        run = bench / "geaet-zinc-quick" / f"seed{seed}"
        (run / "checkpoints").mkdir(parents=True)
        shutil.copy(ckpt, run / "checkpoints" / "best.ckpt")
        if complete:
            (run / "result.json").write_text(json.dumps({"test": 0.0}))
    out = tmp_path / "preds.csv"
    assert main(["predict", "--bench", str(bench), "geaet-zinc-quick", "--smiles", "CCO", "--individual",
                 "--out", str(out)]) == 0
    (row,) = read(out)
    assert set(row) >= {"score_model0", "score_model1"} and "score_model2" not in row
    assert float(row["score_std"]) == 0.0
    assert main(["predict", "--bench", str(bench), "gcn-zinc", "--smiles", "CCO", "--out", str(out)]) == 2
    assert "no runs of 'gcn-zinc'" in capsys.readouterr().err


def test_strict_makes_invalid_rows_an_error_and_writes_nothing(ckpt, tmp_path, capsys):
    out = tmp_path / "preds.csv"
    assert main(["predict", str(ckpt), "--smiles", "CCO", "C1CC(N", "--out", str(out), "--strict"]) == 2
    err = one_line(capsys.readouterr().err)
    assert err == ("gea-graph predict: error: --strict: input row 1 ('C1CC(N') is invalid: RDKit cannot parse this "
                   "SMILES")
    assert not out.exists() and not list(tmp_path.glob(".preds.csv.tmp-*"))


def test_a_graph_model_predicts_its_dataset_and_refuses_smiles(tmp_path, capsys, monkeypatch):
    tree = save_untrained("gin-tree-r2", ["model.hidden=8", "model.layers=1"], tmp_path / "tree.ckpt")
    monkeypatch.setenv("GEA_GRAPH_DATA", str(tmp_path / "data"))
    out = tmp_path / "preds.csv"
    assert main(["predict", str(tree), "--dataset", "tree-r2", "--split", "test", "--out", str(out)]) == 0
    rows = read(out)
    assert list(rows[0])[2:6] == ["class_0", "class_1", "class_2", "class_3"] and rows[0]["smiles"] == ""
    np.testing.assert_allclose([sum(float(r[f"class_{c}"]) for c in range(4)) for r in rows], 1.0, rtol=1e-5)
    capsys.readouterr()
    assert main(["predict", str(tree), "--smiles", "CCO", "--out", str(out)]) == 2
    assert one_line(capsys.readouterr().err) == (
        "gea-graph predict: error: this model cannot take SMILES: it was trained on tree-r2 (tree-r2 graphs are "
        "generated trees (TreeNeighbourMatch), not molecules); give it graphs of that dataset instead")


@pytest.mark.parametrize(("argv", "expected"), [
    (["--csv", "{tmp}/m.csv", "--out", "x.csv"], "--csv needs --smiles-column COL"),
    (["--csv", "{tmp}/m.csv", "--smiles-column", "smi", "--out", "x.csv"],
     "--smiles-column 'smi': {tmp}/m.csv has no such column; its columns are ['smiles', 'y']"),
    (["--csv", "{tmp}/m.csv", "--smiles-column", "smiles", "--id-column", "id", "--out", "x.csv"],
     "--id-column 'id': {tmp}/m.csv has no such column"),
    (["--csv", "{tmp}/missing.csv", "--smiles-column", "smiles", "--out", "x.csv"], "argument --csv: '{tmp}/missing.csv' does not exist"),
    (["--smiles", "CCO"], "--out preds.csv is required"),
    (["--dataset", "zinc", "--out", "x.csv"], "--dataset NAME and --split SPLIT go together"),
    (["--dataset", "zinc", "--split", "nope", "--out", "x.csv"], "argument --split: 'nope' is not known"),
    (["--smiles", "CCO", "--out", "x.csv", "--batch-size", "0"], "argument --batch-size: '0' is not allowed"),
    (["--smiles", "CCO", "--out", "x.csv", "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["--smiles", "CCO", "--ogb-submission", "sub"], "--ogb-submission needs --dataset pcqm4mv2"),
])
def test_clear_errors(ckpt, data_dir, tmp_path, capsys, monkeypatch, argv, expected):
    monkeypatch.setenv("GEA_GRAPH_DATA", str(data_dir))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.csv").write_text("smiles,y\nCCO,1\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        code = main(["predict", str(ckpt), *argv])
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    assert code == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("gea-graph predict: error: ") and expected.replace("{tmp}", str(tmp_path)) in err


def test_missing_checkpoint_and_cuda_without_gpu(tmp_path, capsys):
    import torch

    assert main(["predict", str(tmp_path / "none.ckpt"), "--smiles", "CCO", "--out", "x.csv"]) == 2
    assert "does not exist" in one_line(capsys.readouterr().err)
    if not torch.cuda.is_available():  # the device is checked before the file is read
        (tmp_path / "none.ckpt").write_bytes(b"")
        assert main(["predict", str(tmp_path / "none.ckpt"), "--smiles", "CCO", "--out", "x.csv", "--device",
                     "cuda"]) == 2
        assert "--device cuda: no CUDA device is available here" in one_line(capsys.readouterr().err)
