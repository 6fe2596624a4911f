"""Checkpoints load safely and portably: weights only, on CPU whatever device they were saved on, their record
checked (versions, featuriser), old ones loaded or told how to convert, and never a file of their choosing read."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import gea_graph
from gea_graph.cli import main
from gea_graph.inference import convert_checkpoint
from gea_graph.train import CheckpointError
from gea_graph.train.checkpoint import RECORD_KEY, UncheckedWeightsWarning, save_checkpoint

from .conftest import save_untrained

SMALL = ["model.hidden=16", "model.layers=1", "model.pe.dim=4"]


def saved_as_on(device: str, ckpt: dict, path: Path) -> Path:
    """``torch.save`` with every storage tagged with :obj:`device` (as a checkpoint saved there records it), through
    torch's public ``register_package`` hook; the hook is removed afterwards."""
    registry = torch.serialization._package_registry
    before = list(registry)
    torch.serialization.register_package(-100, lambda obj: device, lambda obj, location: None)
    try:
        torch.save(ckpt, path)
    finally:
        registry[:] = before
    return path


@pytest.mark.parametrize("device", ["cuda:0", "meta"])
def test_a_checkpoint_saved_on_another_device_loads_on_cpu(zinc_run, tmp_path, device):
    source = zinc_run / "checkpoints" / "best.ckpt"
    ckpt = torch.load(source, weights_only=True)
    path = saved_as_on(device, ckpt, tmp_path / f"{device.split(':')[0]}.ckpt")
    assert f"{device}".encode() in path.read_bytes()  # the storages name that device
    if device.startswith("cuda") and not torch.cuda.is_available():  # the control: torch's own default fails
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=True)
    trained = gea_graph.load_model(path)
    assert trained.device == torch.device("cpu")
    np.testing.assert_allclose(trained.predict(["CCO", "c1ccccc1O"]).values,
                               gea_graph.load_model(source).predict(["CCO", "c1ccccc1O"]).values, rtol=1e-6)


def test_checkpoints_load_weights_only(tmp_path):
    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(tmp_path / 'marker')!r}, 'w').write('x')",))

    path = tmp_path / "evil.ckpt"
    torch.save({"hyper_parameters": {"recipe": {}}, "state_dict": {}, "payload": Payload()}, path)
    with pytest.raises(CheckpointError, match=r"is corrupt or not a gea-graph checkpoint \(it holds a Python object "
                                              r"\(exec\) that a safe, weights-only load refuses to run\)$"):
        gea_graph.load_model(path)
    assert not (tmp_path / "marker").exists()


def test_a_newer_checkpoint_is_refused_naming_both_versions(tmp_path, capsys):
    path = save_untrained("geaet-zinc-quick", SMALL, tmp_path / "new.ckpt")
    ckpt = torch.load(path, weights_only=True)
    ckpt[RECORD_KEY] = {**ckpt[RECORD_KEY], "format": 2, "recipe_schema": 3,
                        "versions": {**ckpt[RECORD_KEY]["versions"], "gea-graph": "9.1.0"}}
    torch.save(ckpt, path)
    assert main(["predict", str(path), "--smiles", "CCO", "--out", str(tmp_path / "p.csv")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1
    assert (f"was written by gea-graph 9.1.0 (checkpoint format 2, recipe schema 3), newer than this gea-graph "
            f"{gea_graph.__version__} (checkpoint format 1, recipe schema 1): upgrade gea-graph") in err[0]


def test_a_checkpoint_from_before_the_record_loads(tmp_path):
    old = save_untrained("geaet-zinc-quick", SMALL, tmp_path / "old.ckpt", record=False)
    new = save_untrained("geaet-zinc-quick", SMALL, tmp_path / "new.ckpt")
    with pytest.warns(UncheckedWeightsWarning, match="carries no record and no digest of its weights"):
        trained = gea_graph.load_model(old)
    assert trained.featurizer == gea_graph.load_model(new).featurizer and trained.target_names == ["score"]
    np.testing.assert_allclose(trained.predict(["CCO"]).values, gea_graph.load_model(new).predict(["CCO"]).values)


def test_an_old_checkpoint_whose_featuriser_changed_says_how_to_convert(tmp_path):
    """A ZINC model trained on OGB's 9 columns when that was ZINC's default: its recipe does not say so. Loading
    it names the fix; convert_checkpoint records the feature mode, and the converted file loads."""
    old = save_untrained("geaet-zinc-quick", [*SMALL, "model.node_encoder=atom", "model.edge_encoder=bond"],
                         tmp_path / "old.ckpt", record=False)
    with pytest.raises(CheckpointError, match=r"reads 9 atom feature columns but its featuriser \(zinc, 'bench'\) "
                                              r"gives 1; it predates the featuriser record; convert it with "
                                              r"gea_graph.inference.convert_checkpoint"), \
            pytest.warns(UncheckedWeightsWarning):
        gea_graph.load_model(old)
    converted = convert_checkpoint(old, tmp_path / "converted.ckpt", features="ogb")
    trained = gea_graph.load_model(converted)
    assert trained.featurizer.features == "ogb" and trained.predict(["C[Si](C)(C)C"]).valid.all()
    with pytest.raises(CheckpointError, match="already carries its record"):
        convert_checkpoint(converted, tmp_path / "again.ckpt")


def test_records_that_do_not_fit_are_refused(tmp_path):
    path = save_untrained("geaet-zinc-quick", SMALL, tmp_path / "m.ckpt")
    ckpt = torch.load(path, weights_only=True)
    for change, message in [({"featurizer": {**ckpt[RECORD_KEY]["featurizer"], "features": "custom"}},
                             "feature mode 'custom'"),
                            ({"targets": {"names": ["a", "b"], "scaling": None}}, "do not match the model's 1"),
                            ({"targets": {"names": ["score"], "scaling": {"mean": 1.0}}}, "scales its targets")]:
        torch.save({**ckpt, RECORD_KEY: {**ckpt[RECORD_KEY], **change}}, path)
        with pytest.raises(CheckpointError, match=message):
            gea_graph.load_model(path)
    # weights missing from a file written as such (its digest matches them): the weights' check, not the digest's
    save_checkpoint({**ckpt, "state_dict": {k: v for k, v in ckpt["state_dict"].items() if "head" not in k}}, path)
    with pytest.raises(CheckpointError, match=r"its weights do not fit the model of its recipe \(model.head.\S+ "
                                              r"missing"):
        gea_graph.load_model(path)


def test_a_checkpoint_does_not_choose_files_to_read(tmp_path, monkeypatch, capsys):
    """Its recipe names a hostile data root and CSV; predicting from SMILES reads neither, and --dataset reads the
    user's data root ($GEA_GRAPH_DATA)."""
    hostile = tmp_path / "shipped"
    hostile.mkdir()
    (hostile / "targets.csv").write_text("smiles,y\nCCO,1\n")
    path = save_untrained("gin-tree-r2", ["model.hidden=8", "model.layers=1", f"data.root={hostile / 'data'}"],
                          tmp_path / "tree.ckpt")
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["hyper_parameters"]["recipe"]["data"]["root"] == str(hostile / "data")
    pickle.dumps(ckpt[RECORD_KEY])  # plain types
    assert "shipped" not in repr(ckpt[RECORD_KEY])
    monkeypatch.setenv("GEA_GRAPH_DATA", str(tmp_path / "mine"))
    assert main(["predict", str(path), "--dataset", "tree-r2", "--split", "test", "--out",
                 str(tmp_path / "p.csv")]) == 0, capsys.readouterr().err
    assert (tmp_path / "mine" / "tree-r2").is_dir() and not (hostile / "data").exists()
