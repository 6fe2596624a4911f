"""``gea-graph predict``: rows in input order, the error column and the summary line, CSV input in chunks, dataset
splits, ensembles (mean, std, individual columns, --bench), embeddings, --strict and clear errors."""

from __future__ import annotations

import csv
import json
import re
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
    (["--csv", "{tmp}/missing.csv", "--smiles-column", "smiles", "--out", "x.csv"],
     "argument --csv: '{tmp}/missing.csv' does not exist"),
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


# -- issue 49: huge molecules, 10 MB lines, whitespace, non-finite outputs, header-only files ------------------------
GOOD = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN", "CCCl", "OCC(O)CO"]


def test_a_huge_molecule_or_line_is_an_invalid_row_and_the_others_are_predicted(ckpt, tmp_path, capsys):
    big = tmp_path / "big.csv"  # the reproduction: one 50,000-atom chain
    big.write_text("smiles\n" + "C" * 50_000 + "\n")
    assert main(["predict", str(ckpt), "--csv", str(big), "--smiles-column", "smiles", "--out",
                 str(tmp_path / "p.csv")]) == 0
    line = one_line(capsys.readouterr().out)
    assert line.startswith("0 predicted, 1 invalid") and len(line) < 400
    (row,) = read(tmp_path / "p.csv")
    assert row["score"] == "" and "50,000 characters, more than the 10,000 allowed" in row["error"]

    table = tmp_path / "mixed.csv"  # a 10 MB line and a 1,200-atom chain among good rows: ids stay in place
    with table.open("w") as f:
        f.write("name,smiles\n" + "".join(f"m{i},{s}\n" for i, s in enumerate(GOOD[:3])))
        f.write("huge," + "C" * 10_000_000 + "\nchain," + "C" * 1_200 + "\n")
        f.write("".join(f"n{i},{s}\n" for i, s in enumerate(GOOD[3:])))
    out = tmp_path / "mixed-p.csv"
    argv = ["predict", str(ckpt), "--csv", str(table), "--smiles-column", "smiles", "--id-column", "name", "--out",
            str(out)]
    assert main(argv) == 0
    assert one_line(capsys.readouterr().out).startswith("6 predicted, 2 invalid")
    rows = read(out)
    assert [r["name"] for r in rows] == ["m0", "m1", "m2", "huge", "chain", "n0", "n1", "n2"]
    assert "(line 5) has 10,000,005 bytes" in rows[3]["error"] and rows[3]["smiles"] == ""
    assert rows[4]["error"] == "1,200 atoms/nodes, more than the bound of 1,000 (max_nodes)"
    expected = gea_graph.load_model(ckpt).predict(GOOD).values[:, 0]
    got = [float(r["score"]) for r in rows if not r["error"]]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert main([*argv[:-1], str(tmp_path / "wider.csv"), "--max-nodes", "1500"]) == 0  # the bound is adjustable
    assert one_line(capsys.readouterr().out).startswith("7 predicted, 1 invalid")
    assert read(tmp_path / "wider.csv")[4]["score"] != ""


def test_memory_of_a_csv_predict_does_not_grow_with_its_rows_or_a_huge_line(ckpt, tmp_path):
    """Peak RSS of ``gea-graph predict`` (a child process, measured by its parent): 1,000 plain rows, then 4,000 rows
    with a 10 MB line and a 50,000-atom row inside (which asked for 18.6 GiB or crashed RDKit before). The second
    costs no more memory (chunks of 500 rows, records read at most 128 KiB), and every other row is predicted. (The
    same file at 1,000,000 rows was run by hand: too long for CI.)"""
    import os
    import subprocess
    import sys

    def table(rows: int, huge: bool) -> Path:
        path = tmp_path / f"rows{rows}.csv"
        with path.open("w") as f:
            f.write("smiles\n")
            for i in range(rows):
                if huge and i in (rows // 3, rows // 2):
                    f.write("C" * (10_000_000 if i == rows // 3 else 50_000) + "\n")
                else:
                    f.write(GOOD[i % 6] + "\n")
        return path

    measure = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL,"
               " stderr=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    env = {**os.environ, "GEA_GRAPH_CHUNK_ROWS": "500", "OMP_NUM_THREADS": "1"}
    peaks = {}
    for rows, huge in ((1_000, False), (4_000, True)):
        out = tmp_path / f"p{rows}.csv"
        command = [sys.executable, "-c", measure, sys.executable, "-m", "gea_graph", "predict", str(ckpt), "--csv",
                   str(table(rows, huge)), "--smiles-column", "smiles", "--out", str(out)]
        peaks[rows] = int(subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout) / 1024
        result = read(out)
        invalid = [i for i, r in enumerate(result) if r["error"]]
        assert len(result) == rows and invalid == ([rows // 3, rows // 2] if huge else [])
        assert all(r["score"] for i, r in enumerate(result) if i not in invalid)
    assert peaks[4_000] - peaks[1_000] < 64, peaks  # MiB: bounded, whatever the rows and the huge ones


def test_whitespace_inside_a_smiles_is_an_invalid_row_not_a_truncation(ckpt, tmp_path, capsys):
    out = tmp_path / "p.csv"
    assert main(["predict", str(ckpt), "--smiles", "CC O", "CCO", " CCO ", "--out", str(out)]) == 0
    assert one_line(capsys.readouterr().out).startswith("2 predicted, 1 invalid")
    rows = read(out)
    assert rows[0]["score"] == "" and rows[0]["error"].startswith("whitespace (' ') inside the SMILES")
    assert rows[1]["score"] == rows[2]["score"] != ""  # outer whitespace is stripped: the same molecule
    table = tmp_path / "cells.csv"
    table.write_text('smiles\n"CC\nO"\nCCO\n')
    assert main(["predict", str(ckpt), "--csv", str(table), "--smiles-column", "smiles", "--out", str(out)]) == 0
    assert one_line(capsys.readouterr().out).startswith("1 predicted, 1 invalid")
    rows = read(out)
    assert rows[0]["smiles"] == "CC\nO" and "whitespace ('\\n')" in rows[0]["error"] and rows[1]["score"] != ""
    ethane = gea_graph.load_model(ckpt).predict(["CC"]).values[0, 0]
    assert float(rows[1]["score"]) != pytest.approx(ethane)


def test_non_finite_outputs_are_invalid_rows_and_never_an_infinite_std(ckpt, tmp_path):
    import torch

    from gea_graph.inference.predict import predict_to_files, smiles_source

    good, broken = gea_graph.load_model(ckpt), gea_graph.load_model(ckpt)
    with torch.no_grad():
        bias = [p for name, p in broken.model.named_parameters() if name.endswith("bias")][-1]
        bias.fill_(float("inf"))  # as a corrupted weight would
    out = tmp_path / "p.csv"
    summary = predict_to_files([good, broken], smiles_source(GOOD, [good, broken]), out, progress=False)
    assert (summary.predicted, summary.invalid) == (0, len(GOOD))
    rows = read(out)
    assert all(r["score"] == r["score_std"] == "" for r in rows)
    assert re.match(r"model 1 gave (inf|nan) for 'score': not a number to report", rows[0]["error"])
    summary = predict_to_files([good, good], smiles_source(GOOD, [good, good]), out, progress=False)
    assert (summary.predicted, summary.invalid) == (len(GOOD), 0)
    assert all(float(r["score_std"]) == 0.0 for r in read(out))


def test_a_header_only_csv_is_an_empty_table(ckpt, tmp_path, capsys):
    table = tmp_path / "empty.csv"
    table.write_text("smiles\n")
    out = tmp_path / "p.csv"
    assert main(["predict", str(ckpt), "--csv", str(table), "--smiles-column", "smiles", "--out", str(out)]) == 0
    assert one_line(capsys.readouterr().out).startswith("0 predicted, 0 invalid (wrote ")
    assert out.read_text().splitlines() == ["row,smiles,score,error"]


def test_a_graph_beyond_the_bounds_is_an_invalid_input(ckpt, tmp_path):
    from gea_graph.data import SizeBounds
    from gea_graph.inference.inputs import graph_chunks
    from gea_graph.inference.predict import Source, predict_to_files

    trained = gea_graph.load_model(ckpt)
    small = trained.featurizer.featurize(GOOD[:2])
    chain = trained.featurizer.featurize(["C" * 1_200], SizeBounds(max_nodes=1_500))
    graphs = [*small.batch([0]).to_data_list(), *chain.batch([0]).to_data_list(), *small.batch([1]).to_data_list()]
    out = tmp_path / "p.csv"
    summary = predict_to_files([trained], Source(graph_chunks(graphs), 3), out, progress=False)
    assert (summary.predicted, summary.invalid) == (2, 1)
    rows = read(out)
    assert [r["smiles"] for r in rows] == [GOOD[0], "", GOOD[1]]
    assert rows[1]["error"] == "1,200 atoms/nodes, more than the bound of 1,000 (max_nodes)"
    expected = trained.predict(GOOD[:2]).values[:, 0]
    np.testing.assert_allclose([float(rows[0]["score"]), float(rows[2]["score"])], expected, rtol=1e-5, atol=1e-6)
    wider = predict_to_files([trained], Source(graph_chunks(graphs, bounds=SizeBounds(max_nodes=1_500)), 3), out,
                             progress=False)
    assert (wider.predicted, wider.invalid) == (3, 0)


def test_a_batch_dependent_model_warns_only_when_batch_size_asks_for_another(tmp_path):
    # The README said such a model's predict warns; it warns only when --batch-size differs from the recipe's
    # evaluation batch size, and predicts with that size in every case.
    import warnings

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert "(a warning says so only when `--batch-size` asks for another size)" in readme
    ckpt = save_untrained("geaet-zinc-quick", ["model.norm_scope=batch", "model.hidden=16", "model.layers=1",
                                               "model.pe.dim=4", "trainer.eval_batch_size=4"], tmp_path / "b.ckpt")
    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN", "CCCl", "c1ccncc1", "OCCO"]
    tables = []
    for more, warns in (((), False), (("--batch-size", "4"), False), (("--batch-size", "2"), True)):
        out = tmp_path / f"p{len(tables)}.csv"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main(["predict", str(ckpt), "--smiles", *smiles, "--out", str(out), *more]) == 0
        said = [str(w.message) for w in caught if "norm_scope: batch" in str(w.message)]
        assert len(said) == int(warns), (more, said)
        tables.append(read(out))
    assert tables[0] == tables[1] == tables[2]
