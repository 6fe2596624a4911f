"""``gea-graph viz`` and ``gea-graph diagnose`` on real ZINC molecules, from a small checkpoint trained here."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from gea_graph.cli import main
from gea_graph.inference import load_model
from gea_graph.nn.external_attention import ExternalAttention
from gea_graph.train import GraphTask, fit, load_recipe
from gea_graph.train.checkpoint import RECORD_KEY, checkpoint_record, save_checkpoint
from gea_graph.viz.pictures import attention_picture
from gea_graph.viz.scores import reduce_external

from .helpers import redness

TINY = [
    "data.subset=32",
    "data.pe=null",
    "model.pe=null",
    "model.hidden=16",
    "model.layers=2",
    "trainer.max_epochs=1",
    "trainer.batch_size=16",
    "trainer.max_time=null",
]


@pytest.fixture(scope="module")
def trained(mirror, tmp_path_factory) -> Path:
    """A tiny GEAET model (GatedGCN + self-attention + GEA) trained for one epoch on real ZINC graphs."""
    out = tmp_path_factory.mktemp("run")
    fit(load_recipe("geaet-zinc-quick", TINY), out, progress=False, verbose=False)
    return out / "checkpoints" / "best.ckpt"


@pytest.fixture(scope="module")
def self_only(tmp_path_factory) -> Path:
    """An untrained checkpoint of the same recipe without GEA, in the training checkpoint's format."""
    recipe = load_recipe("geaet-zinc-quick", [*TINY, "model.gea=false"])
    task = GraphTask(recipe.to_dict())
    path = tmp_path_factory.mktemp("self") / "self.ckpt"
    save_checkpoint({"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict(),
                     RECORD_KEY: checkpoint_record(recipe)}, path)
    return path


def test_trained_checkpoint(trained, self_only, tmp_path, capsys):
    """One test, so that the trained checkpoint is made once even when the suite runs on several workers."""
    check_scores_are_the_layer_attention(trained)
    check_viz_command(trained, self_only, tmp_path, capsys)
    check_smiles_are_featurised_as_the_training_set(trained, tmp_path, capsys)
    check_diagnose_command(trained, self_only, tmp_path, capsys)


def check_scores_are_the_layer_attention(checkpoint: Path) -> None:
    trained = load_model(checkpoint)
    model = trained.model
    graphs = trained.dataset_graphs("zinc", "test", [0, 5, 9])
    picture, records = attention_picture(model, graphs, "external", layer=2)
    gea = next(m for m in model.layers[1].modules() if isinstance(m, ExternalAttention))
    seen = []
    handle = gea.register_forward_hook(
        lambda _m, args, _k, out: seen.append(args[0]), with_kwargs=True
    )
    batch = Batch.from_data_list(graphs)
    with torch.no_grad():
        model(batch)
        handle.remove()
        attn = gea(seen[0], batch.batch, return_attention=True)[2]
    for b, (record, xy) in enumerate(zip(records, picture.atom_xy)):
        np.testing.assert_allclose(
            record.scores, reduce_external(attn[batch.batch == b]).numpy(), rtol=1e-5
        )
        # the most attended atom is drawn in a strong colour, the least attended almost white
        assert redness(picture.image, xy[record.scores.argmax()]) > 0.5
        assert redness(picture.image, xy[record.scores.argmin()]) < 0.15


def check_viz_command(checkpoint: Path, self_only: Path, tmp_path: Path, capsys) -> None:
    out, scores = tmp_path / "attention.png", tmp_path / "scores.csv"
    argv = ["viz", str(checkpoint), "--dataset", "zinc", "--index", "0,5", "--kind", "both"]
    assert main([*argv, "--out", str(out), "--scores", str(scores)]) == 0
    img = matplotlib.image.imread(out)
    assert img.shape[1] == 4 * 300 and img.shape[2] in (3, 4)
    with scores.open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["kind"] for r in rows} == {"external", "self"} and {r["layer"] for r in rows} == {"2"}
    for kind in ("external", "self"):  # each molecule's scores sum to 1 over its atoms
        for panel in {r["panel"] for r in rows if r["kind"] == kind}:
            total = sum(float(r["score"]) for r in rows if r["panel"] == panel)
            assert total == pytest.approx(1.0, abs=1e-4)
    assert "top atom" in capsys.readouterr().out
    svg = tmp_path / "mols.svg"
    assert (
        main(
            [
                "viz",
                str(self_only),
                "--smiles",
                "CCO",
                "c1ccncc1",
                "--kind",
                "self",
                "--out",
                str(svg),
            ]
        )
        == 0
    )
    assert svg.read_text().lstrip().startswith("<?xml")


def check_smiles_are_featurised_as_the_training_set(checkpoint: Path, tmp_path: Path, capsys) -> None:
    """Regression: viz --smiles on a ZINC checkpoint featurised with OGB's 9 columns instead of ZINC's 28 types
    (silently wrong pictures, and 'index out of range in self' for iodine). The molecule is drawn from the graph
    the ZINC dataset holds for it (row 1,034 of the raw file, a training molecule)."""
    smiles = "Cc1c(I)cnn1C"
    scores = tmp_path / "iodine.csv"
    argv = ["viz", str(checkpoint), "--smiles", smiles, "--out", str(tmp_path / "i.png"), "--scores", str(scores)]
    assert main(argv) == 0, capsys.readouterr().err
    trained = load_model(checkpoint)
    (drawn,) = trained.graphs([smiles])
    train = trained.featurizer.load_dataset("train")
    stored = train[train.smiles.index(smiles)]
    assert torch.equal(drawn.x, stored.x) and drawn.x.shape == (8, 1)  # the 28-type encoding, iodine = type 15
    assert torch.equal(drawn.edge_attr, stored.edge_attr) and torch.equal(drawn.edge_index, stored.edge_index)
    assert 15 in drawn.x.view(-1).tolist()
    with scores.open() as handle:
        assert len(list(csv.DictReader(handle))) == 8


def check_diagnose_command(checkpoint: Path, other: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "diag"
    argv = ["diagnose", str(checkpoint), "--compare", str(other), "--dataset", "zinc"]
    assert main([*argv, "--graphs", "40", "--batch-size", "16", "--out", str(out)]) == 0
    with (out / "layers.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 3 and {r["graphs"] for r in rows} == {"40"}
    assert all(-1 <= float(r["cosine_similarity"]) <= 1 for r in rows)
    assert (
        matplotlib.image.imread(
            io.BytesIO((out / "diagnostics.png").read_bytes()), format="png"
        ).ndim
        == 3
    )
    assert "cosine similarity" in capsys.readouterr().out


def test_viz_errors(self_only, tmp_path, capsys):
    png = str(tmp_path / "x.png")
    assert (
        main(["viz", str(self_only), "--smiles", "CCO", "C1CC(N", "--kind", "self", "--out", png])
        == 2
    )
    assert "argument --smiles: 'C1CC(N' is not a molecule" in capsys.readouterr().err
    assert main(["viz", str(self_only), "--smiles", "CCO", "--kind", "external", "--out", png]) == 2
    assert "has no external attention" in capsys.readouterr().err
    assert main(["viz", str(self_only), "--smiles", "CCO", "--out", str(tmp_path / "x.jpg")]) == 2
    assert ".png or .svg" in capsys.readouterr().err
    assert main(["viz", str(tmp_path / "missing.ckpt"), "--smiles", "CCO", "--out", png]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_diagnose_of_a_model_without_gfsa_writes_no_frequency_response(mirror, self_only, tmp_path, capsys):
    # it wrote a header-only frequency_response.csv and listed it as written
    out = tmp_path / "diag"
    out.mkdir()
    (out / "frequency_response.csv").write_text("a table of an earlier diagnosis, with GFSA\n")
    argv = ["diagnose", str(self_only), "--dataset", "zinc", "--graphs", "8", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["diagnostics.png", "layers.csv"]
    assert f"wrote {out / 'layers.csv'} (layers)" in printed
    # an earlier diagnosis's table in the same folder would read as this model's
    assert f"removed {out / 'frequency_response.csv'} (of an earlier diagnosis: no model here has GFSA)" in printed


def test_viz_of_one_molecule_and_the_kind_a_model_has(self_only, tmp_path, capsys):
    # "1 molecules"; and the default --kind external on a model with self-attention only named no way out
    svg = str(tmp_path / "one.svg")
    assert main(["viz", str(self_only), "--smiles", "CCO", "--kind", "self", "--out", svg]) == 0
    assert "px, 1 molecule)" in capsys.readouterr().out
    assert main(["viz", str(self_only), "--smiles", "CCO", "--out", svg]) == 2
    err = capsys.readouterr().err
    assert "holds an ExternalAttention module; it has self attention: use --kind self" in err
    assert len(err.strip().splitlines()) == 1
