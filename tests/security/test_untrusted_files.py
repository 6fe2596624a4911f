"""Files planted in a data root, or a checkpoint from someone else, never run code.

Each payload is a ``.pt`` file that creates a marker file when unpickled (through ``exec``, ``subprocess.Popen`` or
``pathlib.Path.write_text``, not only ``os.system``); it is planted where ``data prepare``, ``train``, ``viz`` and
``diagnose`` read processed caches (the split files and PyG's ``pre_transform.pt`` / ``pre_filter.pt``).
"""

from __future__ import annotations

import builtins
import contextlib
import pathlib
import subprocess
import time
from pathlib import Path

import pytest
import torch

from gea_graph.cli import main
from gea_graph.data.base import CacheError, cache_key, load_cache
from gea_graph.train import GraphTask, load_recipe
from gea_graph.train.checkpoint import RECORD_KEY, checkpoint_record, save_checkpoint
from gea_graph.train.data import load_datasets
from gea_graph.train.recipe import DataConfig, RecipeError


class ExecPayload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.exec, (f"open({self.marker!r}, 'w').write('exec')",)


class PopenPayload(ExecPayload):
    def __reduce__(self):
        return subprocess.Popen, (["touch", self.marker],)


class WriteTextPayload(ExecPayload):
    def __reduce__(self):
        return pathlib.Path.write_text, (pathlib.Path(self.marker), "write_text")


PAYLOADS = [ExecPayload, PopenPayload, WriteTextPayload]
TREE_FILES = ("train.pt", "test.pt", "pre_transform.pt", "pre_filter.pt")
TINY_TREE = ["model.hidden=8", "model.layers=1", "trainer.max_epochs=1"]


def fired(marker: Path, payload: type) -> bool:
    """Whether the payload ran (``Popen`` runs its command asynchronously: give it a moment)."""
    for _ in range(10 if payload is PopenPayload else 1):
        if marker.exists():
            return True
        time.sleep(0.05)
    return marker.exists()


def plant(folder: Path, payload: type, marker: Path, names=TREE_FILES) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        torch.save(payload(marker), folder / name)


def plant_tree(root: Path, payload: type, marker: Path) -> None:
    plant(root / "tree-r2" / "processed" / cache_key(None, None, "seed=0"), payload, marker)


@pytest.fixture(scope="module")
def tree_checkpoint(tmp_path_factory) -> Path:
    """An untrained checkpoint of a tiny tree model, in the training checkpoint's format."""
    recipe = load_recipe("gin-tree-r2", TINY_TREE)
    task = GraphTask(recipe.to_dict())
    path = tmp_path_factory.mktemp("ckpt") / "tree.ckpt"
    save_checkpoint({"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict(),
                     RECORD_KEY: checkpoint_record(recipe)}, path)
    return path


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.__name__)
def test_payloads_are_live_when_unpickled_unsafely(tmp_path, payload):
    """The control: each payload does create its marker under ``weights_only=False``."""
    marker = tmp_path / "marker"
    torch.save(payload(marker), tmp_path / "p.pt")
    torch.load(tmp_path / "p.pt", weights_only=False)
    assert fired(marker, payload)


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.__name__)
def test_load_cache_refuses_and_names_the_file(tmp_path, payload):
    marker = tmp_path / "marker"
    torch.save(payload(marker), tmp_path / "train.pt")
    with pytest.raises(CacheError, match=r"train\.pt.*not loaded"):
        load_cache(tmp_path / "train.pt")
    assert not fired(marker, payload)


# Every command meets at least one payload and every payload several commands (all of them meet load_cache).
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.__name__)
def test_data_prepare_never_runs_a_planted_cache(tmp_path, payload, capsys):
    root, marker = tmp_path / "data", tmp_path / "marker"
    plant_tree(root, payload, marker)
    assert main(["data", "prepare", "tree", "--depth", "2", "--root", str(root)]) == 2
    assert not fired(marker, payload)
    err = capsys.readouterr().err
    assert "train.pt" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("payload", [PopenPayload], ids=lambda p: p.__name__)
def test_train_never_runs_a_planted_cache(tmp_path, payload, capsys):
    root, marker = tmp_path / "data", tmp_path / "marker"
    plant_tree(root, payload, marker)
    code = main(["train", "gin-tree-r2", *TINY_TREE, f"data.root={root}", "--out", str(tmp_path / "run"),
                 "--no-progress", "--accelerator", "cpu"])
    assert code == 2 and not fired(marker, payload)
    assert "train.pt" in capsys.readouterr().err


@pytest.mark.parametrize(("command", "payload"), [("viz", WriteTextPayload), ("viz", ExecPayload),
                                                  ("diagnose", PopenPayload), ("diagnose", WriteTextPayload)],
                         ids=lambda p: getattr(p, "__name__", p))
def test_inspection_commands_never_run_a_planted_cache(tmp_path, payload, command, tree_checkpoint, capsys):
    root, marker = tmp_path / "data", tmp_path / "marker"
    plant_tree(root, payload, marker)
    out = tmp_path / ("x.png" if command == "viz" else "diag")
    code = main([command, str(tree_checkpoint), "--dataset", "tree-r2", "--root", str(root), "--out", str(out)])
    assert code == 2 and not fired(marker, payload)
    assert "test.pt" in capsys.readouterr().err


def test_a_checkpoint_does_not_choose_the_data_root(tmp_path, monkeypatch, capsys):
    """The checkpoint's recipe names a hostile data root (relative, as a shipped checkpoint would); diagnose reads
    the user's root ($GEA_GRAPH_DATA here) and never looks at the hostile one."""
    hostile, marker = tmp_path / "shipped" / "data", tmp_path / "marker"
    plant_tree(hostile, ExecPayload, marker)
    recipe = load_recipe("gin-tree-r2", [*TINY_TREE, "data.root=shipped/data"])
    task = GraphTask(recipe.to_dict())
    ckpt = tmp_path / "shipped" / "model.ckpt"
    save_checkpoint({"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict(),
                     RECORD_KEY: checkpoint_record(recipe)}, ckpt)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEA_GRAPH_DATA", str(tmp_path / "mine"))
    code = main(["diagnose", str(ckpt), "--dataset", "tree-r2", "--graphs", "8", "--out", str(tmp_path / "d")])
    assert not marker.exists()
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "mine" / "tree-r2").is_dir()


def test_data_cls_must_be_a_dataset_class(tmp_path):
    marker = tmp_path / "marker"
    with pytest.raises(RecipeError, match=r"'os\.system' is not a dataset class"):
        load_datasets(DataConfig(cls="os.system", options={"command": f"touch {marker}"}))
    assert not marker.exists()


TINY_DATASET = '''
import torch
from torch_geometric.data import Data, InMemoryDataset


class TinyPlanted(InMemoryDataset):
    def __init__(self, root, transform=None, pre_transform=None):
        super().__init__(root, transform, pre_transform)
        self.load(self.processed_paths[0])

    @property
    def raw_file_names(self):
        return []

    @property
    def processed_file_names(self):
        return ["data.pt"]

    def download(self):
        pass

    def process(self):
        graph = Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([0]))
        self.save([graph] * 10, self.processed_paths[0])
'''


@pytest.mark.parametrize("planted", ["pre_transform.pt", "data.pt"])
def test_third_party_dataset_class_reads_caches_weights_only(tmp_path, monkeypatch, planted):
    """PyG's Dataset reads pre_transform.pt with weights_only=False and fs.torch_load retries a refused load
    unsafely; a recipe's data.cls is built with every torch.load weights-only."""
    (tmp_path / "tiny_planted_module.py").write_text(TINY_DATASET)
    monkeypatch.syspath_prepend(str(tmp_path))
    root, marker = tmp_path / "data", tmp_path / "marker"
    cfg = DataConfig(cls="tiny_planted_module.TinyPlanted", root=str(root))
    assert len(load_datasets(cfg)["train"]) == 8  # builds and reads its own cache
    torch.save(ExecPayload(marker), root / "TinyPlanted" / "processed" / planted)
    # PyG's InMemoryDataset reads data.pt with fs.torch_load, which warns that the weights-only load failed before it
    # retries unsafely: the warning is expected, the retry is what must not happen.
    refused = (pytest.warns(UserWarning, match="Weights only load failed") if planted == "data.pt"
               else contextlib.nullcontext())
    with pytest.raises(ValueError, match="not loaded"), refused:
        load_datasets(cfg)
    assert not marker.exists()
