"""Checkpoints of short real training runs, made once per test session and shared by the xdist workers (a file lock
makes one worker train each; the others read its run folder)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from gea_graph.train import GraphTask, fit, load_recipe
from gea_graph.train.checkpoint import RECORD_KEY, checkpoint_record, save_checkpoint

#: The ZINC run: GEAET (GatedGCN + softmax attention + GEANet) with LapPE-4, one layer of 16 channels, one epoch on
#: the whole of ZINC (so that its recorded test metric is the whole test split's).
ZINC_RUN = ["data.pe=lap:4", "model.pe.kind=lap", "model.pe.size=4", "model.pe.dim=4", "model.hidden=16",
            "model.layers=1", "trainer.max_epochs=1", "trainer.max_time=null", "trainer.batch_size=128"]
#: The Peptides-func run: GCN + GEANet without PE (its data is the data tests' build), one epoch on the whole of
#: Peptides-func.
PEPTIDES_RUN = ["optim.horizon=epochs", "data.pe=null", "model.pe=null", "model.hidden=16", "model.layers=1",
                "model.gea_heads=2", "model.units=4", "trainer.max_epochs=1", "trainer.max_time=null",
                "trainer.batch_size=128"]


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One torch thread per test process: the suite runs two processes on two cores (threads would fight)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def data_dir(shared_data_root: Path) -> Path:
    """The data root the runs trained on (the session's shared one: the data tests' builds are reused)."""
    return shared_data_root


@pytest.fixture(scope="session")
def run_once(build_once, data_dir: Path) -> Callable[[str, str, Sequence[str]], Path]:
    """``run_once(name, recipe, overrides)``: the run folder of a short training run, trained by the first worker
    that asks (under a lock) into the shared folder."""

    def train(root: Path, name: str, recipe: str, overrides: Sequence[str]) -> Path:
        out = root / "runs" / name
        if not (out / "result.json").is_file():
            fit(load_recipe(recipe, [*overrides, f"data.root={data_dir}"]), out, progress=False, verbose=False,
                accelerator="cpu")
        return out

    return lambda name, recipe, overrides: build_once(f"run-{name}", lambda root: train(root, name, recipe,
                                                                                        overrides))


@pytest.fixture(scope="session")
def zinc_run(mirror, run_once) -> Path:
    return run_once("zinc-run", "geaet-zinc-quick", ZINC_RUN)


@pytest.fixture(scope="session")
def peptides_run(mirror, run_once) -> Path:
    return run_once("peptides-run", "gcn-geanet-peptides-func-cpu", PEPTIDES_RUN)


def save_untrained(recipe: str, overrides: Sequence[str], path: Path, record: bool = True) -> Path:
    """A checkpoint of a recipe's freshly initialised model in the training checkpoint's format (with the record
    training writes, or without it as checkpoints were before)."""
    loaded = load_recipe(recipe, overrides)
    torch.manual_seed(0)
    task = GraphTask(loaded.to_dict())
    ckpt = {"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict()}
    if record:
        ckpt[RECORD_KEY] = checkpoint_record(loaded)
    save_checkpoint(ckpt, path)  # with the digest of its weights, as training writes it
    return path
