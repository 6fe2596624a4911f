"""``gea-graph predict --dataset pcqm4mv2 --split test-dev --ogb-submission DIR`` on a PCQM4Mv2 replica in OGB's raw
layout whose test-dev split has OGB's size (147,037 molecules: OGB's PCQM4Mv2Evaluator takes no other), made of
small molecules so that it builds in seconds."""

from __future__ import annotations

import csv
import gzip

import numpy as np
import pytest
import torch

import gea_graph
from gea_graph.cli import main
from gea_graph.inference.predict import PCQM4MV2_SUBMISSION_SIZES

from .conftest import save_untrained

SMALL_MOLECULES = ["C", "CC", "CO", "CCO", "CN", "C=O", "CC#N", "c1ccccc1", "CC(=O)O", "OCCO", "CCN(C)C"]


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """``root/pcqm4m-v2/raw/data.csv.gz`` and ``split_dict.pt`` as OGB's zip unpacks: 60 labelled rows (train,
    valid), OGB's test-dev size and a small test-challenge (a submission for it is refused)."""
    root = tmp_path_factory.mktemp("pcqm4mv2-replica")
    folder = root / "pcqm4m-v2"
    (folder / "raw").mkdir(parents=True)
    dev = PCQM4MV2_SUBMISSION_SIZES["test-dev"]
    sizes = {"train": 50, "valid": 10, "test-dev": dev, "test-challenge": 5}
    total = sum(sizes.values())
    with gzip.open(folder / "raw" / "data.csv.gz", "wt", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["idx", "smiles", "homolumogap"])
        for i in range(total):
            writer.writerow([i, SMALL_MOLECULES[i % len(SMALL_MOLECULES)], 5.0 + i % 7 if i < 60 else ""])
    bounds = np.cumsum([0, *sizes.values()])
    torch.save({name: np.arange(bounds[k], bounds[k + 1]) for k, name in enumerate(sizes)},
               folder / "split_dict.pt")
    return root


def test_ogb_submission_file_from_the_test_dev_split(replica, tmp_path, monkeypatch, capsys):
    ckpt = save_untrained("graphormer-pcqm4mv2", ["model.hidden=16", "model.layers=1", "model.heads=2",
                                                  "model.graphormer.ffn_channels=16", "trainer.eval_batch_size=2048"],
                          tmp_path / "pcqm.ckpt")
    monkeypatch.setenv("GEA_GRAPH_DATA", str(replica))
    monkeypatch.setenv("GEA_GRAPH_CHUNK_ROWS", "50000")
    submission = tmp_path / "submission"
    assert main(["predict", str(ckpt), "--dataset", "pcqm4mv2", "--split", "test-dev",
                 "--ogb-submission", str(submission)]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert out[0].startswith("147037 predicted, 0 invalid (wrote ")
    written = np.load(submission / "y_pred_pcqm4m-v2_test-dev.npz")["y_pred"]
    assert written.shape == (147_037,) and written.dtype == np.float32
    first = [SMALL_MOLECULES[(60 + i) % len(SMALL_MOLECULES)] for i in range(11)]  # test-dev starts at row 60
    expected = gea_graph.load_model(ckpt).predict(first).values[:, 0]
    np.testing.assert_allclose(written[:11], expected, rtol=1e-5, atol=1e-5)
    assert (submission / "preds-test-dev.csv").is_file()
    assert not [p for p in submission.iterdir() if p.name.startswith(".")]  # no staging folder left
    assert main(["predict", str(ckpt), "--dataset", "pcqm4mv2", "--split", "test-challenge",
                 "--ogb-submission", str(submission)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "split 'test-challenge' here has 5 graphs" in err[0]
