r"""One training run of a recipe with the Lightning Trainer: checkpoints, logs, resume, DDP, the run summary.

A run directory holds::

    recipe.yaml               the resolved recipe (overrides applied)
    checkpoints/best.ckpt     the epoch with the best validation metric
    checkpoints/last.ckpt     the last finished epoch (``--resume`` continues from it)
    metrics.csv               one row per epoch: train loss, validation and test metric, lr, seconds
    logs/                     Lightning's CSV log (and TensorBoard's, when asked for)
    result.json               the summary, written once the run is complete (with trainer.eval_train, the selected
                              checkpoint's metric on the training split too: ``train``)
    .lock                     held by the process training into the directory (its pid, host and start time)

One process at a time trains into a run directory (:func:`run_lock`). A resumed run must have the recipe its
checkpoint was trained with (:func:`check_run_dir`); this is checked, together with the checkpoint itself, before
anything in the directory is written.
"""
from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.plugins.layer_sync import LayerSync

from gea_graph import checks
from gea_graph.data.store import available_cpus
from gea_graph.io import (
    LockError,
    append_to,
    atomic_write,
    clean_stale_temporaries,
    ensure_folder,
    exclusive_temporary,
    hold_lock,
    write_json,
)
from gea_graph.nn import DistributedBatchNorm
from gea_graph.train.data import check_splits, load_datasets, make_loader
from gea_graph.train.memory import ReleaseFreeHeap, peak_resident_mib
from gea_graph.train.module import GraphTask, time_cap
from gea_graph.train.recipe import Recipe, RecipeError, dump_recipe, load_yaml, recipe_from_dict

RESULT_FILE = "result.json"
METRICS_FILE = "metrics.csv"
RECIPE_FILE = "recipe.yaml"
LOCK_FILE = ".lock"
#: Recipe keys that may differ between a run and its resumption: they change neither the model nor its training.
RESUMABLE_CHANGES = ("name", "description", "paper", "sweep", "trainer.max_time", "trainer.num_workers",
                     "trainer.log_every_n_steps", "trainer.seeds", "trainer.compile", "trainer.eval_train",
                     "trainer.release_memory_every", "trainer.release_memory_above",
                     "model.attn_impl")


class RunLockError(LockError):
    r"""Another process is training into the same run directory."""


def _launcher_rank() -> bool:
    # DDP's extra processes (started by Lightning or torchrun with these variables) belong to the locking process.
    return all(int(os.environ.get(name) or 0) == 0 for name in ("RANK", "LOCAL_RANK", "NODE_RANK"))


@contextlib.contextmanager
def run_lock(out_dir: str | os.PathLike) -> Iterator[None]:
    r"""Holds the lock ``out_dir/.lock`` (:func:`gea_graph.io.hold_lock`: ``flock``, released by the kernel
    when the process dies; opened with ``O_NOFOLLOW``, refusing a planted link or any file that is not a lock file)
    for the block; raises :class:`RunLockError` naming the holder (pid, host, start time) when another process has
    it. DDP's non-zero ranks do not lock (their launcher holds the lock)."""
    if not _launcher_rank():
        yield
        return
    out = Path(ensure_folder(out_dir))
    try:
        lock = hold_lock(out / LOCK_FILE)
        lock.__enter__()
    except LockError as err:
        holder = str(err).split(" is held by ", 1)[-1]
        raise RunLockError(f"run directory {out} is in use by {holder}; wait for it to finish, or choose another "
                           f"--out") from None
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def _flat(raw: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(raw, dict):
        out: dict[str, Any] = {}
        for key, value in raw.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: raw}


def recipe_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    r"""The dotted keys whose values differ between two recipes (as plain dictionaries), ignoring
    :data:`RESUMABLE_CHANGES`, as ``"key: old -> new"``."""
    a, b = _flat(old), _flat(new)
    changes = []
    for key in sorted(set(a) | set(b)):
        if any(key == i or key.startswith(f"{i}.") for i in RESUMABLE_CHANGES):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            changes.append(f"{key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return changes


def recipe_digest(recipe: dict[str, Any]) -> str:
    r"""A digest of a recipe (a plain dictionary) that ignores :data:`RESUMABLE_CHANGES`: two recipes with the same
    digest train the same model the same way (their time caps aside)."""
    flat = {k: v for k, v in _flat(recipe).items()
            if not any(k == i or k.startswith(f"{i}.") for i in RESUMABLE_CHANGES)}
    return hashlib.sha1(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:10]


def check_run_dir(run_dir: str | os.PathLike, recipe: Recipe) -> None:
    r"""Raises :class:`RecipeError` when ``run_dir`` holds a run of a different recipe than ``recipe`` (its
    ``recipe.yaml`` differs outside :data:`RESUMABLE_CHANGES`): such a run can neither be resumed nor counted as a
    result of ``recipe``."""
    path = Path(run_dir) / RECIPE_FILE
    if not path.is_file():
        return
    try:
        stored = load_yaml(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except RecipeError:
        stored = None
    if not isinstance(stored, dict):
        raise RecipeError(f"{path} is not a recipe; delete {run_dir} or choose another --out")
    _refuse_changes(run_dir, stored, recipe)


def _with_defaults(stored: dict[str, Any]) -> dict[str, Any]:
    # A key the stored recipe lacks was added to the schema since; its default keeps the old behaviour (e.g.
    # trainer.deterministic: false), so it counts as that default.
    try:
        return recipe_from_dict(stored).to_dict()
    except (ValueError, TypeError):
        return stored


def _refuse_changes(run_dir: str | os.PathLike, stored: dict[str, Any], recipe: Recipe) -> None:
    changes = recipe_changes(_with_defaults(stored), recipe.to_dict())
    if changes:
        more = f" and {len(changes) - 3} more" if len(changes) > 3 else ""
        raise RecipeError(f"{run_dir} holds a run of a different recipe ({'; '.join(changes[:3])}{more}); "
                          f"use the recipe and overrides it was trained with, or choose another --out")


def _check_checkpoint_fits(path: Path, ckpt: dict[str, Any], module: GraphTask, recipe: Recipe) -> None:
    stored = ckpt.get("hyper_parameters", {}).get("recipe")
    if isinstance(stored, dict):
        _refuse_changes(path.parent.parent, stored, recipe)
    state = ckpt.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {str(path)!r} holds no state_dict; delete it to start over")
    own = module.state_dict()
    bad = sorted(set(own) ^ set(state)) or [k for k in own if tuple(own[k].shape) != tuple(state[k].shape)]
    if bad:
        raise CheckpointError(f"checkpoint {str(path)!r} does not fit the model of this recipe (first mismatch: "
                              f"{bad[0]}); resume with the recipe it was trained with, or choose another --out")


class CheckpointError(RuntimeError):
    r"""A checkpoint that cannot be read (missing, truncated, corrupt or not a plain-types checkpoint)."""


class NoEpochError(ValueError):
    r"""A run whose time cap ended it before its first epoch: it has no result (and is not complete)."""


class CheckpointWriteError(OSError):
    r"""A checkpoint that could not be written (a full disk, a file-size limit); the one before it is intact."""


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    r"""Reads a checkpoint with ``torch.load(..., weights_only=True)``; any failure becomes a
    :class:`CheckpointError` that names the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 -- garbage makes torch's unpickler raise anything (KeyError: 101, ...)
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
        try:
            with exclusive_temporary(path) as tmp:
                torch.save(checkpoint, tmp)
        except (OSError, RuntimeError) as err:  # torch's zip writer reports a full disk as a RuntimeError
            reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            free = shutil.disk_usage(path.parent).free
            raise CheckpointWriteError(
                f"could not write the checkpoint {path} ({reason}; {free / 2 ** 20:,.0f} MiB free on that disk); "
                f"the previous checkpoint is intact: free some space, then continue with --resume") from None

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


class _ResumedWriter(ExperimentWriter):
    # Lightning's writer deletes metrics.csv when it starts in a non-empty folder, losing the rows of the epochs
    # before a resume. This one keeps those rows (the steps before the checkpoint resumed from) and their columns.
    def __init__(self, log_dir: str, resume_step: int | None) -> None:
        self._resume_step = resume_step
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        path = self.metrics_file_path
        if not os.path.isfile(path):
            return
        if self._resume_step is None:  # a fresh run: start a new file
            os.unlink(path)
            return
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") and float(r["step"]) < self._resume_step]
        _write_csv(path, header, rows)
        self.metrics_keys = sorted(header)

    # Lightning's writer opens metrics.csv and hparams.yaml following links; these write through the toolkit's
    # helper instead (a link planted in logs/ is replaced or refused, never written through).
    def save(self) -> None:
        if not self.metrics:
            return
        path = self.metrics_file_path
        new_keys = self._record_new_keys()
        if new_keys and os.path.isfile(path):  # a new column: the file is rewritten with the wider header
            with open(path, newline="") as f:
                old = list(csv.DictReader(f))
            _write_csv(path, self.metrics_keys, old + self.metrics)
        elif os.path.isfile(path):
            with append_to(path) as f:
                csv.DictWriter(f, fieldnames=self.metrics_keys).writerows(self.metrics)
        else:
            _write_csv(path, self.metrics_keys, self.metrics)
        self.metrics = []

    def log_hparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)
        with atomic_write(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE)) as f:
            yaml.safe_dump(self.hparams, f, sort_keys=False)


def _write_csv(path: str | os.PathLike, header: list[str], rows: Iterable[dict[str, Any]]) -> None:
    with atomic_write(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


class RunCSVLogger(CSVLogger):
    r"""Lightning's :class:`~lightning.pytorch.loggers.CSVLogger` in ``RUN/logs/``, agreeing with ``metrics.csv``
    across a kill and ``--resume``: its rows are flushed at every checkpoint, and a resumed run keeps the rows logged
    before the checkpoint it resumes from (``resume_step``: that checkpoint's ``global_step``) and drops later ones.
    """

    def __init__(self, save_dir: str | os.PathLike, resume_step: int | None = None) -> None:
        super().__init__(str(save_dir), name="logs", version="")
        self._resume_step = resume_step

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ResumedWriter(self.log_dir, self._resume_step)
        return self._experiment

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        self.save()


def write_metrics(path: Path, history: Iterable[dict[str, float]]) -> None:
    r"""Writes the per-epoch history as CSV, atomically."""
    rows = list(history)
    _write_csv(path, list(rows[0]), rows)


def read_metrics(path: str | os.PathLike) -> list:
    r"""The rows of a ``metrics.csv`` as dictionaries of floats."""
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def resolve_precision(precision: str, accelerator: str) -> str:
    r"""Lightning's precision for a recipe's ``trainer.precision``: ``auto`` is ``32-true`` on every device (on a
    CUDA GPU with TF32 matrix products, see :func:`fit`); bf16 or fp16 is opt-in (``bf16-mixed``, ``16-mixed``, per
    recipe or as the override ``trainer.precision=bf16-mixed``). fp16 asked for on a CPU-only machine falls back to
    ``32-true``; ``bf16-mixed`` runs there with CPU autocast."""
    gpu = torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")
    if precision == "auto" or (not gpu and precision.startswith("16")):
        return "32-true"
    return precision


def default_workers(cuda: bool, processes_per_node: int) -> int:
    r"""Data-loader workers per loader when the recipe leaves ``trainer.num_workers`` unset: on a GPU 2 (fewer when
    the node has under 4 cores per process), so the next batches are gathered and pinned while the GPU computes; on
    a CPU none, as workers would take cores from the training's own threads (a store gathers a batch in one numpy
    gather per column, far less than a training step)."""
    if not cuda:
        return 0
    return max(0, min(2, available_cpus() // max(processes_per_node, 1) - 2))


class StopAt(Callback):
    r"""Stops a run cleanly at the end of the first epoch that ends after ``deadline`` (a :func:`time.time`), its
    checkpoints written: what ``gea-graph train --stop-after`` and a chunked ``gea-graph bench`` use to end a run
    early and resume it later (in the same folder or a copy of it) exactly where it stopped. Process 0 decides and
    the others follow, so every process of a distributed run stops at the same epoch. :attr:`stopped` tells that it
    did."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.stopped = False

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: GraphTask) -> None:
        late = trainer.strategy.broadcast(time.time() >= self.deadline, src=0)
        last = trainer.max_epochs is not None and trainer.current_epoch + 1 >= trainer.max_epochs
        if late and not trainer.should_stop and not last:  # the run's own end is no pause
            trainer.should_stop = True
            self.stopped = True


class EndAtTimeCap(Callback):
    r"""Ends a run at the end of the epoch (its evaluation included) during which its wall-clock cap ran out.
    Lightning's :class:`~lightning.pytorch.callbacks.Timer` checks the cap after each training step only: a cap that
    runs out while the epoch's validation runs would start another epoch, which trains one step and evaluates again
    (up to 100 s past the 7-minute cap of ``geaet-tree-r5``, whose evaluation takes 46 s; with ``optim.horizon:
    time`` that step's learning rate is already 0). Process 0 decides and the others follow."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: GraphTask) -> None:
        timer = time_cap(trainer)
        remaining = timer.time_remaining() if timer is not None else None
        if remaining is not None and trainer.strategy.broadcast(remaining <= 0, src=0):
            trainer.should_stop = True


class GlobalBatchNorm(LayerSync):
    r"""Lightning's layer-sync plugin (DDP applies it before wrapping the module and reverts it at the end) turning
    every BatchNorm into :class:`~gea_graph.nn.DistributedBatchNorm`: statistics over the global batch, on CPUs
    (gloo) as on GPUs (NCCL). It does nothing in a one-process run."""

    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        return DistributedBatchNorm.convert(model)

    def revert(self, model: torch.nn.Module) -> torch.nn.Module:
        return DistributedBatchNorm.revert(model)


class RunPaused(RuntimeError):
    r"""A run stopped cleanly before its end by :class:`StopAt` (``--stop-after``): ``--resume`` continues it."""


#: Exit code of ``gea-graph train`` for a run paused by ``--stop-after`` (resumable, not finished).
PAUSED_EXIT_CODE = 3


class MovableCheckpoint(ModelCheckpoint):
    r"""Lightning's :class:`~lightning.pytorch.callbacks.ModelCheckpoint` for a run directory that may move (a run
    carried to another machine and resumed there): its state records absolute paths, and Lightning forgets the best
    score when they differ from the current folder (the next epoch would then overwrite ``best.ckpt`` whatever its
    score). The stored paths are re-based onto the current folder, keeping the best score."""

    @property
    def state_key(self) -> str:
        # Lightning's key (it names the class): checkpoints of either class restore into the other
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        stored = state_dict.get("dirpath")
        if stored and self.dirpath and stored != self.dirpath:
            def moved(path: Any) -> Any:
                return os.path.join(self.dirpath, os.path.basename(path)) if isinstance(path, str) and path else path

            state_dict = dict(state_dict, dirpath=self.dirpath)
            for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
                if key in state_dict:
                    state_dict[key] = moved(state_dict[key])
            if isinstance(state_dict.get("best_k_models"), dict):
                state_dict["best_k_models"] = {moved(k): v for k, v in state_dict["best_k_models"].items()}
        super().load_state_dict(state_dict)


def peak_memory_mb() -> float:
    r"""Peak memory of this process in MiB: CUDA's peak allocation on a GPU, else the peak resident set size
    (:func:`~gea_graph.train.memory.peak_resident_mib`)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2 ** 20
    return peak_resident_mib()


def evaluate_train(trainer: L.Trainer, module: GraphTask, checkpoint: ModelCheckpoint,
                   loader: torch.utils.data.DataLoader) -> tuple[float, dict[str, float]]:
    r"""``(metric, further values)`` of the selected checkpoint (``best.ckpt``, the best validation epoch) on the
    training split, in eval mode (``trainer.eval_train``): deterministic and read like the test metric, unlike the
    running accuracy of the training epochs. Every process of a distributed run takes part (``loader`` shares the
    split out, each graph counted once). Lightning's test stage runs it; the module's history is kept (loading the
    checkpoint would roll it back to the best epoch)."""
    if not checkpoint.best_model_path or not os.path.isfile(checkpoint.best_model_path):
        return math.nan, {}  # no epoch with a finite validation metric: nothing was selected
    history = module.history
    try:
        trainer.test(module, loader, ckpt_path=checkpoint.best_model_path, verbose=False)
    finally:
        module.history = history
    return module.train_result or (math.nan, {})


def summarize(module: GraphTask, recipe: Recipe, seed: int, params: int,
              train: tuple[float, dict[str, float]] | None = None) -> dict[str, Any]:
    r"""The run summary (the row of ``results.csv``); ``train``: :func:`evaluate_train`'s, when it ran."""
    best = module.best() or {}
    history = module.history
    result = {
        "recipe": recipe.name, "dataset": recipe.data.label, "seed": seed, "params": params,
        "metric": module.metric_name, "higher_is_better": module.higher_is_better,
        "epochs": len(history), "best_epoch": int(best["epoch"]) if best else -1,
        "val": best.get("val", math.nan), "test": best.get("test", math.nan),
        "train_time_s": sum(r["time"] for r in history), "peak_memory_mb": peak_memory_mb(),
        # the other values of the metric at the best epoch (PCQM-Contact: hits@k, mrr_filtered, ...)
        "test_more": {k[5:]: v for k, v in best.items() if k.startswith("test_")},
        "val_more": {k[4:]: v for k, v in best.items() if k.startswith("val_")},
    }
    if train is not None:  # trainer.eval_train: the selected checkpoint on the training split
        result.update(train=train[0], train_more=train[1])
    return result


def setup_summary(trainer: L.Trainer, recipe: Recipe) -> dict[str, Any]:
    r"""How a run trained, for ``result.json``: the device, the processes (``world_size``), the global and
    per-process batch, the precision (Lightning's name and torch's float32 matmul precision: ``high`` = TF32 on a
    GPU) and whether deterministic algorithms were on."""
    device = trainer.strategy.root_device
    tr = recipe.trainer
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "world_size": trainer.world_size, "global_batch_size": tr.batch_size,
        "batch_size_per_process": tr.batch_size // trainer.world_size,
        "sync_batchnorm": trainer.world_size > 1, "precision": str(trainer.precision),
        "float32_matmul_precision": torch.get_float32_matmul_precision(), "deterministic": tr.deterministic,
    }


def fit(recipe: Recipe, out_dir: str | os.PathLike, seed: int | None = None, resume: bool = False,
        accelerator: str = "auto", devices: int | str = "auto", num_nodes: int = 1,
        strategy: str = "auto", max_time: float | None = None, tensorboard: bool = False,
        progress: bool = True, callbacks: Iterable[Callback] = (), verbose: bool = True,
        stop_after: float | None = None) -> dict[str, Any] | None:
    r"""Trains ``recipe`` into ``out_dir``.

    Several processes (``devices`` x ``num_nodes`` > 1, Lightning's DDP, e.g. ``strategy="ddp"``) train the recipe
    as one process would: ``trainer.batch_size`` is the global batch, shared out among the processes (it must be a
    multiple of their number), each global batch holds the graphs one process would see, BatchNorm statistics are
    synchronised over the global batch, and validation and test shards are disjoint (every graph counted once).
    Every parameter gets a gradient at every step, so DDP runs without searching for unused ones.

    Args:
        recipe: The recipe.
        out_dir: Run directory (see the module docstring).
        seed: The run's seed (default: the recipe's first seed).
        resume: Continue from ``checkpoints/last.ckpt`` (a fresh start when there is none).
        accelerator, devices, num_nodes, strategy: Lightning's.
        max_time: Wall-clock cap in minutes (default: the recipe's ``trainer.max_time``).
        tensorboard: Also log to TensorBoard.
        progress: Show progress bars.
        callbacks: Extra Lightning callbacks.
        verbose: Print the parameter count and the summary.
        stop_after: Stop cleanly at the first epoch end after this many minutes (checkpoints written, no
            ``result.json``) and raise :class:`RunPaused`; ``resume=True`` continues the run exactly. Unlike
            ``max_time`` this does not end the run, it pauses it.

    Returns:
        The summary (also written to ``result.json``) on the main process of a finished run, else ``None``.
    """
    if max_time is not None:
        checks.minutes(max_time, "max_time")
    if seed is not None:
        checks.seed(seed, "seed")
    out = Path(out_dir)
    last = out / "checkpoints" / "last.ckpt"
    if last.exists() and not resume:
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    with run_lock(out), _torch_flags_kept():
        return _fit(recipe, out, seed, resume, accelerator, devices, num_nodes, strategy, max_time, tensorboard,
                    progress, callbacks, verbose, stop_after)


@contextlib.contextmanager
def _torch_flags_kept() -> Iterator[None]:
    # A run sets process-wide flags (deterministic algorithms, TF32 matrix products); the caller's come back after.
    deterministic = torch.are_deterministic_algorithms_enabled()
    matmul = torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_float32_matmul_precision(matmul)


def _fit(recipe: Recipe, out: Path, seed: int | None, resume: bool, accelerator: str, devices: int | str,
         num_nodes: int, strategy: str, max_time: float | None, tensorboard: bool, progress: bool,
         callbacks: Iterable[Callback], verbose: bool, stop_after: float | None) -> dict[str, Any] | None:
    ckpt_dir = out / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    resuming = resume and last.exists()
    if last.exists() and not resume:  # checked again under the lock
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    for folder in (out, ckpt_dir):  # temporaries of a process killed while writing a checkpoint or a table
        clean_stale_temporaries(folder)
    seed = recipe.trainer.seeds[0] if seed is None else seed
    tr = recipe.trainer
    L.seed_everything(seed, workers=True, verbose=False)
    splits = load_datasets(recipe.data)
    check_splits(splits, recipe)

    module = GraphTask(recipe.to_dict(), seed)
    params = module.num_parameters()
    resume_step = None
    if resuming:  # validate first: nothing in the run directory is written before the checkpoint is known to fit
        ckpt = load_checkpoint(last)
        _check_checkpoint_fits(last, ckpt, module, recipe)
        resume_step = int(ckpt.get("global_step", 0))
        del ckpt
    loggers: list[Logger] = [RunCSVLogger(out, resume_step)]
    if tensorboard:
        from lightning.pytorch.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(str(out), name="logs", version="tensorboard"))
    checkpoint = MovableCheckpoint(dirpath=str(ckpt_dir), filename="best", monitor="val/metric",
                                   mode="max" if module.higher_is_better else "min", save_top_k=1, save_last=True,
                                   enable_version_counter=False, auto_insert_metric_name=False)
    minutes = max_time if max_time is not None else tr.max_time
    pause = StopAt(time.time() + stop_after * 60) if stop_after is not None else None
    trainer = L.Trainer(
        max_epochs=tr.max_epochs, accelerator=accelerator, devices=devices, num_nodes=num_nodes,
        strategy=strategy, precision=resolve_precision(tr.precision, accelerator),
        gradient_clip_val=recipe.optim.clip, logger=loggers,
        callbacks=[checkpoint, MetricsWriter(out / METRICS_FILE),
                   ReleaseFreeHeap(tr.release_memory_every, tr.release_memory_above), *([pause] if pause else []),
                   *([EndAtTimeCap()] if minutes else []),
                   *callbacks],
        plugins=[AtomicCheckpointIO(), GlobalBatchNorm()], max_time={"seconds": minutes * 60} if minutes else None,
        num_sanity_val_steps=0, enable_progress_bar=progress, enable_model_summary=False,
        log_every_n_steps=tr.log_every_n_steps, deterministic=tr.deterministic, default_root_dir=str(out),
        # The loaders share every batch out among the processes themselves (ShardedBatchSampler: disjoint shards,
        # the recipe's global batch); BatchNorm normalises over the global batch (GlobalBatchNorm), as one process.
        use_distributed_sampler=False)
    world = trainer.world_size
    if tr.batch_size % world:
        raise RecipeError(f"trainer.batch_size {tr.batch_size} is the global batch and must be a multiple of the "
                          f"{world} training processes (devices x nodes); choose a batch size or device count "
                          f"that divides")
    for split, dataset in splits.items():
        if len(dataset) < world:
            raise RecipeError(f"the {split} split has {len(dataset)} graphs, fewer than the {world} training "
                              f"processes; use fewer devices or more graphs")
    # Only now, with the run known to start: a link planted there would send checkpoints or logs elsewhere.
    for folder in (ckpt_dir, out / "logs"):
        ensure_folder(folder, within=out)
    cuda = trainer.strategy.root_device.type == "cuda"
    if cuda and str(trainer.precision).startswith("32"):
        torch.set_float32_matmul_precision("high")  # TF32 matrix products: `precision: auto` on a GPU
    workers = tr.num_workers if tr.num_workers is not None else default_workers(cuda, world // num_nodes)
    eval_bs = tr.eval_batch_size or tr.batch_size
    train_loader = make_loader(splits["train"], tr.batch_size, shuffle_seed=seed, num_workers=workers,
                               pin_memory=cuda)
    eval_loaders = [make_loader(splits[s], eval_bs, num_workers=workers, pin_memory=cuda) for s in ("val", "test")]
    if trainer.is_global_zero:
        out.mkdir(parents=True, exist_ok=True)
        dump_recipe(recipe, out / RECIPE_FILE)
        if verbose:
            print(f"{recipe.name}: params: {params}", flush=True)
    start = time.perf_counter()
    trainer.fit(module, train_loader, eval_loaders, ckpt_path=str(last) if resuming else None)
    if trainer.interrupted:
        return None
    paused = pause is not None and pause.stopped
    train = None
    if tr.eval_train and module.history and not paused:  # every process: the split is sharded among them
        train = evaluate_train(trainer, module, checkpoint,
                               make_loader(splits["train"], eval_bs, num_workers=workers, pin_memory=cuda))
    if not trainer.is_global_zero:
        return None
    if paused:
        raise RunPaused(f"{out}: stopped after {stop_after:g} minutes at the end of epoch {len(module.history)} "
                        f"(checkpoints written); continue it with --resume")
    if not module.history:  # a result of no epoch would count as a complete run, with NaN metrics
        why = f"within the time cap of {minutes:g} min (--max-time or trainer.max_time)" if minutes else \
            "before the run was stopped"
        raise NoEpochError(f"no epoch finished {why}; {out} holds no result: raise the cap, then run again with "
                           f"--resume")
    result = summarize(module, recipe, seed, params, train)
    result.update(setup_summary(trainer, recipe), wall_time_s=time.perf_counter() - start)
    write_json(out / RESULT_FILE, result)
    if verbose:
        train_text = f", train {result['train']:.4f}" if "train" in result else ""
        print(f"{recipe.name} seed {seed}: best epoch {result['best_epoch']}, val {module.metric_name} "
              f"{result['val']:.4f}, test {result['test']:.4f}{train_text}, params: {params}", flush=True)
    return result


def read_result(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    r"""The summary of a complete run, or ``None`` (no ``result.json``, an unreadable one, or one of a run that
    finished no epoch, which older versions wrote)."""
    path = Path(run_dir) / RESULT_FILE
    try:
        result = json.loads(path.read_text()) if path.is_file() else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(result, dict) or not isinstance(result.get("epochs"), int) or result["epochs"] < 1:
        return None
    return result
