"""``gea-graph evaluate`` on checkpoints of short real runs equals the test metric their result.json records, with
the datasets' official evaluators: ZINC (MAE), Peptides-func (LRGB's AP), a PCQM4Mv2 replica (OGB's evaluator) and
PCQM-Contact files in LRGB's format (Hits@k, raw and filtered MRR)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gea_graph.cli import main
from gea_graph.inference.evaluate import lrgb_average_precision
from gea_graph.train import fit, load_recipe

#: A small Peptides-func model without PE (an untrained checkpoint is enough to be refused).
PEPTIDES_SMALL = ["data.pe=null", "model.pe=null", "model.hidden=16", "model.layers=1", "model.gea_heads=2",
                  "model.units=4"]


def evaluate(run: Path, dataset: str, split: str, root: Path, tmp_path: Path, capsys) -> dict:
    out = tmp_path / "evaluation.json"
    argv = ["evaluate", str(run / "checkpoints" / "best.ckpt"), "--dataset", dataset, "--split", split,
            "--root", str(root), "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert f"{dataset} {split} {result['metric']}" in printed
    return result


def recorded(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())


def test_zinc_mae_equals_the_run(zinc_run, data_dir, tmp_path, capsys):
    result = evaluate(zinc_run, "zinc", "test", data_dir, tmp_path, capsys)
    assert result["metric"] == "mae" and result["graphs"] == 1000 and result["higher_is_better"] is False
    (model,) = result["models"]
    assert model["value"] == pytest.approx(recorded(zinc_run)["test"], rel=1e-5)


def test_peptides_func_lrgb_ap_equals_the_run(peptides_run, data_dir, tmp_path, capsys):
    result = evaluate(peptides_run, "peptides-func", "test", data_dir, tmp_path, capsys)
    (model,) = result["models"]
    assert result["metric"] == "ap" and "LRGB's average precision" in model["evaluator"]
    assert model["value"] == pytest.approx(recorded(peptides_run)["test"], rel=1e-5)


def test_lrgb_ap_is_ogbs_eval_ap():
    from ogb.graphproppred import Evaluator

    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 2, (50, 128)).astype(float)
    y_true[rng.random(y_true.shape) < 0.2] = np.nan
    y_true[:, 3] = 0  # a label without positives is left out
    y_pred = rng.random((50, 128))
    ours = lrgb_average_precision(y_true, y_pred)
    assert ours == pytest.approx(Evaluator("ogbg-molpcba").eval({"y_true": y_true, "y_pred": y_pred})["ap"])


@pytest.fixture(scope="module")
def pcqm_run(mirror, tmp_path_factory) -> tuple[Path, Path]:
    """A tiny Graphormer trained one epoch on a 400-molecule PCQM4Mv2 replica (its run tests on OGB's valid)."""
    from gea_graph.bench.replica import make_replica

    root = tmp_path_factory.mktemp("pcqm")
    make_replica(root, rows=400)
    run = root / "run"
    fit(load_recipe("graphormer-pcqm4mv2", [f"data.root={root}", "model.hidden=16", "model.layers=1",
                                            "model.heads=2", "model.graphormer.ffn_channels=16",
                                            "trainer.max_epochs=1", "trainer.batch_size=64",
                                            "optim.warmup_steps=1"]), run, progress=False, verbose=False,
        accelerator="cpu")
    return root, run


def test_pcqm4mv2_ogb_evaluator_equals_the_run(pcqm_run, tmp_path, capsys):
    root, run = pcqm_run
    result = evaluate(run, "pcqm4mv2", "val", root, tmp_path, capsys)
    (model,) = result["models"]
    assert model["evaluator"] == "ogb.lsc.PCQM4Mv2Evaluator"
    assert model["value"] == pytest.approx(recorded(run)["test"], rel=1e-5)
    argv = ["evaluate", str(run / "checkpoints" / "best.ckpt"), "--dataset", "pcqm4mv2", "--split", "test-dev",
            "--root", str(root), "--out", str(tmp_path / "e.json")]
    assert main(argv) == 2
    assert "has no labels (a hidden test split)" in capsys.readouterr().err


def write_pcqm_contact(root: Path, graphs: int = 12) -> None:
    """LRGB's PCQM-Contact raw format (per split a list of (x, edge_attr, edge_index, edge_label_index,
    edge_label)) with random molecules-sized graphs and contacts."""
    gen = torch.Generator().manual_seed(0)
    raw = root / "pcqm-contact" / "raw"
    raw.mkdir(parents=True)
    for split in ("train", "val", "test"):
        items = []
        for _ in range(graphs):
            n = int(torch.randint(5, 12, (1,), generator=gen))
            src = torch.arange(1, n)
            dst = torch.randint(0, n, (n - 1,), generator=gen) % src
            edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
            pairs = torch.randint(0, n, (2, 6), generator=gen)
            items.append((torch.randint(0, 2, (n, 9), generator=gen), torch.zeros(edge_index.size(1), 3,
                                                                                   dtype=torch.long),
                          edge_index, pairs, torch.tensor([1, 1, 1, 0, 0, 0])))
        torch.save(items, raw / f"{split}.pt")


def test_pcqm_contact_ranking_metrics_equal_the_run(tmp_path_factory, tmp_path, capsys):
    root = tmp_path_factory.mktemp("contact")
    write_pcqm_contact(root)
    run = root / "run"
    fit(load_recipe("gcn-pcqm-contact", [f"data.root={root}", "model.hidden=8", "model.out_channels=8",
                                         "model.layers=1", "trainer.max_epochs=1", "trainer.batch_size=4"]),
        run, progress=False, verbose=False, accelerator="cpu")
    result = evaluate(run, "pcqm-contact", "test", root, tmp_path, capsys)
    (model,) = result["models"]
    expected = recorded(run)
    assert result["metric"] == "mrr" and "LinkRanking" in model["evaluator"]
    assert model["value"] == pytest.approx(expected["test"], rel=1e-5)
    assert set(model["more"]) == {"hits@1", "hits@3", "hits@10", "mrr_filtered", "hits@1_filtered",
                                  "hits@3_filtered", "hits@10_filtered"}
    for key, value in expected["test_more"].items():
        assert model["more"][key] == pytest.approx(value, rel=1e-5), key


def test_evaluate_errors(zinc_run, data_dir, tmp_path, capsys):
    ckpt = str(zinc_run / "checkpoints" / "best.ckpt")
    assert main(["evaluate", ckpt, "--dataset", "zinc", "--split", "nope", "--root", str(data_dir),
                 "--out", str(tmp_path / "e.json")]) == 2
    assert "argument --split: 'nope' is not known" in capsys.readouterr().err
    assert main(["evaluate", ckpt, "--dataset", "zinc", "--split", "test", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_a_dataset_of_other_targets_is_refused_in_one_line(tmp_path, capsys):
    # Peptides-func's model reads OGB features, as ZINC(features="ogb") gives them: the featurisation fits, but its
    # 10 labels cannot be scored against ZINC's one value (this ended in a RuntimeError traceback).
    from .conftest import save_untrained

    ckpt = save_untrained("gcn-geanet-peptides-func-cpu", PEPTIDES_SMALL, tmp_path / "func.ckpt")
    out = tmp_path / "e.json"
    code = main(["evaluate", str(ckpt), "--dataset", "zinc", "--split", "test", "--root", str(tmp_path / "data"),
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "predicts 10 output(s) scored by ap; zinc has 1 target(s) scored by MAE" in err
    assert "Traceback" not in err and not out.exists() and not (tmp_path / "data").exists()


def test_a_subset_run_is_noted_as_scored_on_its_whole_split(mirror, data_dir, tmp_path, capsys):
    # A run with data.subset=64 records the metric of the first 64 test graphs in result.json; evaluate scores the
    # whole split, and said nothing of the difference.
    from .conftest import ZINC_RUN, save_untrained

    small = [o for o in ZINC_RUN if not o.startswith("trainer.")]
    subset = save_untrained("geaet-zinc-quick", [*small, "data.subset=64"], tmp_path / "subset.ckpt")
    whole = save_untrained("geaet-zinc-quick", small, tmp_path / "whole.ckpt")
    printed = {}
    for ckpt in (subset, whole):
        argv = ["evaluate", str(ckpt), "--dataset", "zinc", "--split", "test", "--root", str(data_dir),
                "--out", str(tmp_path / f"{ckpt.stem}.json")]
        assert main(argv) == 0, capsys.readouterr().err
        printed[ckpt.stem] = capsys.readouterr().out
    notes = [line for line in printed["subset"].splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "trained and tested on a subset (data.subset=64); this is the whole test split" in \
        notes[0]
    assert json.loads((tmp_path / "subset.json").read_text())["graphs"] == 1000
    assert "note:" not in printed["whole"]
