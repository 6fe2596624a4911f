r"""One training run of a recipe with the Lightning Trainer: checkpoints, logs, resume, DDP, the run summary.

A run directory holds::

    recipe.yaml               the resolved recipe (overrides applied)
    checkpoints/best.ckpt     the epoch with the best validation metric
    checkpoints/last.ckpt     the last finished epoch (``--resume`` continues from it)
    metrics.csv               one row per epoch: train loss, validation and test metric, lr, seconds
    logs/                     Lightning's CSV log (and TensorBoard's, when asked for)
    result.json               the summary, written once the run is complete
"""
from __future__ import annotations

import csv
import json
import math
import os
import pickle
import resource
import time
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger

from gea_graph.train.data import load_datasets, make_loader
from gea_graph.train.module import GraphTask
from gea_graph.train.recipe import Recipe, dump_recipe

RESULT_FILE = "result.json"
METRICS_FILE = "metrics.csv"


class CheckpointError(RuntimeError):
    r"""A checkpoint that cannot be read (missing, truncated, corrupt or not a plain-types checkpoint)."""


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    r"""Reads a checkpoint with ``torch.load(..., weights_only=True)``; any failure becomes a
    :class:`CheckpointError` that names the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt or not a gea-graph checkpoint "
                              f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                              "delete it to start over") from None


class AtomicCheckpointIO(TorchCheckpointIO):
    r"""Writes each checkpoint to a temporary file in the same folder and renames it into place (a kill never leaves
    a half-written ``last.ckpt``); reads with :func:`load_checkpoint`."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            torch.save(checkpoint, tmp)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        return load_checkpoint(path, map_location if map_location is not None else "cpu")


class MetricsWriter(Callback):
    r"""Rewrites ``metrics.csv`` (atomically) from the module's history after every validation (rank 0)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_validation_end(self, trainer: L.Trainer, pl_module: GraphTask) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or not pl_module.history:
            return
        write_metrics(self.path, pl_module.history)


def write_metrics(path: Path, history: Iterable[dict[str, float]]) -> None:
    r"""Writes the per-epoch history as CSV, atomically."""
    rows = list(history)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def read_metrics(path: str | os.PathLike) -> list:
    r"""The rows of a ``metrics.csv`` as dictionaries of floats."""
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def resolve_precision(precision: str, accelerator: str) -> str:
    r"""``auto``: ``bf16-mixed`` on a CUDA GPU that supports it, else ``32-true``. Half precision asked for on a
    CPU-only machine falls back to ``32-true`` (mixed precision where supported)."""
    gpu = torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")
    if precision == "auto":
        return "bf16-mixed" if gpu and torch.cuda.is_bf16_supported() else "32-true"
    if not gpu and precision.startswith("16"):
        return "32-true"
    return precision


def peak_memory_mb() -> float:
    r"""Peak memory of this process in MiB: CUDA's peak allocation on a GPU, else the peak resident set size."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2 ** 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def summarize(module: GraphTask, recipe: Recipe, seed: int, params: int) -> dict[str, Any]:
    r"""The run summary (the row of ``results.csv``)."""
    best = module.best() or {}
    history = module.history
    return {
        "recipe": recipe.name, "dataset": recipe.data.label, "seed": seed, "params": params,
        "metric": module.metric_name, "higher_is_better": module.higher_is_better,
        "epochs": len(history), "best_epoch": int(best["epoch"]) if best else -1,
        "val": best.get("val", math.nan), "test": best.get("test", math.nan),
        "train_time_s": sum(r["time"] for r in history), "peak_memory_mb": peak_memory_mb(),
        # the other values of the metric at the best epoch (PCQM-Contact: hits@k, mrr_filtered, ...)
        "test_more": {k[5:]: v for k, v in best.items() if k.startswith("test_")},
        "val_more": {k[4:]: v for k, v in best.items() if k.startswith("val_")},
    }


def fit(recipe: Recipe, out_dir: str | os.PathLike, seed: int | None = None, resume: bool = False,
        accelerator: str = "auto", devices: int | str = "auto", num_nodes: int = 1,
        strategy: str = "auto", max_time: float | None = None, tensorboard: bool = False,
        progress: bool = True, callbacks: Iterable[Callback] = (), verbose: bool = True) -> dict[str, Any] | None:
    r"""Trains ``recipe`` into ``out_dir``.

    Args:
        recipe: The recipe.
        out_dir: Run directory (see the module docstring).
        seed: The run's seed (default: the recipe's first seed).
        resume: Continue from ``checkpoints/last.ckpt`` (a fresh start when there is none).
        accelerator, devices, num_nodes, strategy: Lightning's (``strategy="ddp"`` with ``devices=2`` trains on two
            processes, tolerating parameters unused by the loss such as the last layer's edge update; metrics are
            synchronised by torchmetrics).
        max_time: Wall-clock cap in minutes (default: the recipe's ``trainer.max_time``).
        tensorboard: Also log to TensorBoard.
        progress: Show progress bars.
        callbacks: Extra Lightning callbacks.
        verbose: Print the parameter count and the summary.

    Returns:
        The summary (also written to ``result.json``) on the main process of a finished run, else ``None``.
    """
    out = Path(out_dir)
    ckpt_dir = out / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    if last.exists() and not resume:
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    seed = recipe.trainer.seeds[0] if seed is None else seed
    tr = recipe.trainer
    L.seed_everything(seed, workers=True, verbose=False)
    splits = load_datasets(recipe.data)
    eval_bs = tr.eval_batch_size or tr.batch_size
    train_loader = make_loader(splits["train"], tr.batch_size, shuffle_seed=seed, num_workers=tr.num_workers)
    eval_loaders = [make_loader(splits[s], eval_bs, num_workers=tr.num_workers) for s in ("val", "test")]

    module = GraphTask(recipe.to_dict(), seed)
    params = module.num_parameters()
    loggers: list[Logger] = [CSVLogger(str(out), name="logs", version="")]
    if tensorboard:
        from lightning.pytorch.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(str(out), name="logs", version="tensorboard"))
    checkpoint = ModelCheckpoint(dirpath=str(ckpt_dir), filename="best", monitor="val/metric",
                                 mode="max" if module.higher_is_better else "min", save_top_k=1, save_last=True,
                                 enable_version_counter=False, auto_insert_metric_name=False)
    minutes = max_time if max_time is not None else tr.max_time
    if strategy == "ddp":
        # The last layer's edge update (GatedGCN) feeds no loss: DDP must tolerate unused parameters.
        strategy = "ddp_find_unused_parameters_true"
    trainer = L.Trainer(
        max_epochs=tr.max_epochs, accelerator=accelerator, devices=devices, num_nodes=num_nodes,
        strategy=strategy, precision=resolve_precision(tr.precision, accelerator),
        gradient_clip_val=recipe.optim.clip, logger=loggers,
        callbacks=[checkpoint, MetricsWriter(out / METRICS_FILE), *callbacks],
        plugins=[AtomicCheckpointIO()], max_time={"seconds": minutes * 60} if minutes else None,
        num_sanity_val_steps=0, enable_progress_bar=progress, enable_model_summary=False,
        log_every_n_steps=tr.log_every_n_steps, deterministic=False, default_root_dir=str(out))
    if trainer.is_global_zero:
        out.mkdir(parents=True, exist_ok=True)
        dump_recipe(recipe, out / "recipe.yaml")
        if verbose:
            print(f"{recipe.name}: params: {params}", flush=True)
    start = time.perf_counter()
    trainer.fit(module, train_loader, eval_loaders, ckpt_path=str(last) if resume and last.exists() else None)
    if trainer.interrupted or not trainer.is_global_zero:
        return None
    result = summarize(module, recipe, seed, params)
    result["wall_time_s"] = time.perf_counter() - start
    tmp = out / f".{RESULT_FILE}.tmp"
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, out / RESULT_FILE)
    if verbose:
        print(f"{recipe.name} seed {seed}: best epoch {result['best_epoch']}, val {module.metric_name} "
              f"{result['val']:.4f}, test {result['test']:.4f}, params: {params}", flush=True)
    return result


def read_result(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    r"""The summary of a complete run, or ``None``."""
    path = Path(run_dir) / RESULT_FILE
    return json.loads(path.read_text()) if path.is_file() else None
