"""``gea-graph export``: a torch.export program with dynamic nodes, edges and graphs, equal to the eager model on
batches of other shapes (a one-node graph, a graph without edges), its input signature in the file's metadata, and
a one-line refusal where an architecture cannot be exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch

import gea_graph
from gea_graph.cli import main
from gea_graph.inference.export import METADATA_FILE, batch_inputs

from .conftest import save_untrained

SMALL = ["model.hidden=16", "model.layers=1", "model.heads=2"]
BATCHES = [["C"], ["C.C", "CCO"], ["c1ccccc1O", "C", "CC(=O)Nc1ccc(O)cc1", "C.C", "Cc1c(I)cnn1C"],
           ["CN1CCN(CC1)c1ccc(cc1)C(=O)Nc1ccc(C)c(c1)Nc1nccc(n1)-c1cccnc1"]]


def export(ckpt: Path, tmp_path: Path, capsys) -> tuple[object, dict]:
    out = tmp_path / "model.pt2"
    assert main(["export", str(ckpt), "--out", str(out)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith(f"wrote {out}: ")
    extra = {METADATA_FILE: ""}
    program = torch.export.load(out, extra_files=extra)
    return program, json.loads(extra[METADATA_FILE])


@pytest.fixture(params=["trained geaet-zinc-quick", "graphormer-zinc-cpu", "geaet-gfsa-zinc-cpu"])
def checkpoint(request, zinc_run, tmp_path) -> Path:
    if request.param.startswith("trained"):
        return zinc_run / "checkpoints" / "best.ckpt"
    overrides = SMALL + (["model.pe.dim=4"] if request.param.startswith("geaet") else [])
    return save_untrained(request.param, overrides, tmp_path / "model.ckpt")


def test_export_replays_the_model_on_other_batch_shapes(checkpoint, tmp_path, capsys):
    program, meta = export(checkpoint, tmp_path, capsys)
    trained = gea_graph.load_model(checkpoint)
    names = [i["name"] for i in meta["inputs"]]
    assert names[:2] == ["x", "edge_index"] and "batch" in names
    assert meta["sizes"] == ["num_graphs", "max_num_nodes"] and meta["output"]["names"] == ["score"]
    assert {"name": "edge_index", "dtype": "int64", "shape": [2, "edges"]} in meta["inputs"]
    assert meta["featurizer"] == trained.featurizer.to_dict()
    module = program.module()
    for smiles in BATCHES:
        batch = Batch.from_data_list(trained.graphs(smiles))
        with torch.no_grad():
            eager = trained.model(batch)
            replay = module(*batch_inputs(batch, names))
        assert replay.shape == (len(smiles), 1)
        torch.testing.assert_close(replay, eager, rtol=1e-5, atol=1e-5, msg=str(smiles))


def test_export_of_a_graph_model_and_of_one_that_cannot_be(tmp_path, capsys):
    tree = save_untrained("gin-tree-r2", ["model.hidden=8", "model.layers=1"], tmp_path / "tree.ckpt")
    _, meta = export(tree, tmp_path, capsys)
    assert [i["name"] for i in meta["inputs"]] == ["x", "edge_index", "target_mask", "batch"]
    assert meta["output"] == {"shape": ["graphs", 4], "names": ["class_0", "class_1", "class_2", "class_3"],
                              "task": "target_node", "activation": "softmax"}
    gps = save_untrained("pyg-gps-zinc", SMALL, tmp_path / "gps.ckpt")
    assert main(["export", str(gps), "--out", str(tmp_path / "gps.pt2")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("gea-graph export: error: cannot export pyg_gps (GINEConv + GPSConv "
                                               "multihead): its forward takes no max_num_nodes")
    assert not (tmp_path / "gps.pt2").exists()


def test_the_export_of_a_batch_dependent_model_says_so(tmp_path, capsys):
    # GEA with the authors' batch-wide softmax (norm_scope: batch): predict keeps the recipe's evaluation batch
    # size, but the exported file said nothing, so its user could not know that batch-mates change an output.
    ckpt = save_untrained("geaet-zinc-quick", [*SMALL, "model.pe.dim=4", "model.norm_scope=batch"],
                          tmp_path / "batch.ckpt")
    out = tmp_path / "model.pt2"
    assert main(["export", str(ckpt), "--out", str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "note: this model normalises GEA over the whole batch (norm_scope: batch)" in printed
    extra = {METADATA_FILE: ""}
    torch.export.load(out, extra_files=extra)
    meta = json.loads(extra[METADATA_FILE])
    trained = gea_graph.load_model(ckpt)
    assert meta["batch_dependent"] is True and meta["eval_batch_size"] == trained.eval_batch_size


def test_the_replay_bound_is_printed_readably(tmp_path, capsys, monkeypatch):
    # a replay without difference printed "within 0 of the model" (a ":.1g" of 0.0)
    import gea_graph.inference.export as export_module

    tree = save_untrained("gin-tree-r2", ["model.hidden=8", "model.layers=1"], tmp_path / "tree.ckpt")
    for worst, expected in ((0.0, "replay on other batch shapes equal to the model"),
                            (3.2e-7, "replay on other batch shapes within 3.2e-07 of the model")):
        monkeypatch.setattr(export_module, "check_replay", lambda *_args, worst=worst: worst)
        assert main(["export", str(tree), "--out", str(tmp_path / "tree.pt2")]) == 0, capsys.readouterr().err
        printed = capsys.readouterr().out
        assert printed.splitlines()[0].endswith(expected), printed
