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

One process at a time trains into a run directory (:func:`~gea_graph.train.lock.run_lock`). A resumed run must
have the recipe its checkpoint was trained with (:func:`~gea_graph.train.run_dir.check_run_dir`); this is checked,
together with the checkpoint itself, before anything in the directory is written.

The parts of a run live beside this module: the lock (``lock.py``), the run directory's recipe check and summary
(``run_dir.py``), the CSV logs (``logs.py``), the callbacks (``callbacks.py``) and the precision and worker policy
(``policy.py``).
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger

from gea_graph import checks
from gea_graph.io import clean_stale_temporaries, ensure_folder, write_json
from gea_graph.train.agreement import check_model_data
from gea_graph.train.callbacks import (
    EndAtTimeCap,
    EpochLine,
    GlobalBatchNorm,
    MetricsWriter,
    MovableCheckpoint,
    StopAt,
)
from gea_graph.train.checkpoint import (
    AtomicCheckpointIO,
    check_weights_fit,
    load_checkpoint,
)
from gea_graph.train.data import check_splits, load_datasets, make_loader, resident_splits
from gea_graph.train.lock import run_lock
from gea_graph.train.logs import METRICS_FILE, RunCSVLogger, lightning_banners
from gea_graph.train.memory import ReleaseFreeHeap
from gea_graph.train.module import GraphTask, time_cap
from gea_graph.train.policy import default_workers, peak_memory_mb, resolve_precision, torch_flags_kept
from gea_graph.train.recipe import Recipe, RecipeError, dump_recipe
from gea_graph.train.run_dir import RECIPE_FILE, RESULT_FILE, _refuse_changes


def _check_checkpoint_fits(path: Path, ckpt: dict[str, Any], module: GraphTask, recipe: Recipe) -> None:
    stored = ckpt.get("hyper_parameters", {}).get("recipe")
    if isinstance(stored, dict):
        _refuse_changes(path.parent.parent, stored, recipe)
    check_weights_fit(path, ckpt.get("state_dict"), module.state_dict(),
                      how="; resume with the recipe it was trained with, or choose another --out")


class NoEpochError(ValueError):
    r"""A run whose time cap ended it before its first epoch: it has no result (and is not complete)."""


class RunPaused(RuntimeError):
    r"""A run stopped cleanly before its end by :class:`StopAt` (``--stop-after``): ``--resume`` continues it."""


class WorkerLost(RuntimeError):
    r"""A process of a distributed run died (killed, out of memory, its machine gone): the others cannot go on.
    ``--resume`` continues the run from its last checkpoint."""


def _lost_a_process(err: BaseException) -> bool:
    # gloo reports a peer's death as a RuntimeError naming its transport; NCCL as a DistBackendError
    import torch.distributed as dist

    text = str(err)
    return isinstance(err, getattr(dist, "DistError", ())) or any(
        word in text for word in ("gloo", "Connection reset by peer", "Connection closed by peer", "NCCL"))


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    text = text.split("] ", 1)[-1] if text.startswith("[") else text  # gloo's [source file:line] prefix
    return text.split(". This is typically", 1)[0]


#: Exit code of ``gea-graph train`` for a run paused by ``--stop-after`` (resumable, not finished).
PAUSED_EXIT_CODE = 3


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
        stop_after: float | None = None, banners: bool = False) -> dict[str, Any] | None:
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
        verbose: Print the parameter count, a line per epoch (:class:`~gea_graph.train.callbacks.EpochLine`) and
            the summary.
        banners: Show Lightning's start-up banners, its warnings about its own code and, on a resume, its warning
            that the checkpoints folder is not empty (``--verbose``; :func:`~gea_graph.train.logs.lightning_banners`).
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
    with run_lock(out), torch_flags_kept(), lightning_banners(banners, resuming=resume):
        return _fit(recipe, out, seed, resume, accelerator, devices, num_nodes, strategy, max_time, tensorboard,
                    progress, callbacks, verbose, stop_after)


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
    check_model_data(recipe, splits)  # before any epoch: encoders read the data's columns and vocabularies

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
                   *([EpochLine(f"{recipe.name} seed {seed}")] if verbose else []), *callbacks],
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
    # data.on_device: the splits that fit stay in device memory and their batches are gathered there
    resident = resident_splits(splits, recipe.data.on_device, trainer.strategy.root_device)
    train_loader = make_loader(splits["train"], tr.batch_size, shuffle_seed=seed, num_workers=workers,
                               pin_memory=cuda, resident=resident["train"])
    eval_loaders = [make_loader(splits[s], eval_bs, num_workers=workers, pin_memory=cuda, resident=resident[s])
                    for s in ("val", "test")]
    # an epoch shorter than the logging interval would log no step (and Lightning warns): log once an epoch then
    trainer.log_every_n_steps = max(1, min(trainer.log_every_n_steps, len(train_loader)))
    if trainer.is_global_zero:
        out.mkdir(parents=True, exist_ok=True)
        dump_recipe(recipe, out / RECIPE_FILE)
        if verbose:
            print(f"{recipe.name}: params: {params}", flush=True)
    start = time.perf_counter()
    try:
        trainer.fit(module, train_loader, eval_loaders, ckpt_path=str(last) if resuming else None)
    except RuntimeError as err:
        if world > 1 and _lost_a_process(err):
            raise WorkerLost(f"a training process of this {world}-process run ended ({_first_line(err)}); the "
                             f"checkpoints of the last finished epoch are in {ckpt_dir}: run the same command with "
                             f"--resume to continue") from err
        raise
    if trainer.interrupted:
        return None
    paused = pause is not None and pause.stopped
    train = None
    if tr.eval_train and module.history and not paused:  # every process: the split is sharded among them
        train = evaluate_train(trainer, module, checkpoint,
                               make_loader(splits["train"], eval_bs, num_workers=workers, pin_memory=cuda,
                                           resident=resident["train"]))
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
    timer = time_cap(trainer)
    cut = len(module.history) < tr.max_epochs and timer is not None and timer.time_remaining() <= 0
    result.update(setup_summary(trainer, recipe), wall_time_s=time.perf_counter() - start,
                  epochs_planned=tr.max_epochs, cut_by_time_cap=cut, max_time_min=minutes,
                  data_on_device=[name for name, split in resident.items() if split is not None])
    write_json(out / RESULT_FILE, result)
    if verbose:
        train_text = f", train {result['train']:.4f}" if "train" in result else ""
        best = result["best_epoch"] + 1 if result["best_epoch"] >= 0 else "none"
        print(f"{recipe.name} seed {seed}: {epochs_text(result)}; best epoch {best}, val "
              f"{module.metric_name} {result['val']:.4f}, test {result['test']:.4f}{train_text}, params: {params}",
              flush=True)
    return result


def epochs_text(result: dict[str, Any]) -> str:
    r"""``"8 epochs"``, or for a run that its time cap ended early ``"2 of 8 epochs, cut by the time cap (5 min)"``
    (:obj:`result`: a ``result.json``). Epochs are counted from 1 wherever they are shown; ``best_epoch`` in
    ``result.json`` and ``epoch`` in ``metrics.csv`` are Lightning's 0-based index."""
    done, planned = result["epochs"], result.get("epochs_planned")
    if not result.get("cut_by_time_cap"):
        return f"{done} epoch{'s' if done != 1 else ''}"
    cap = f" ({result['max_time_min']:g} min)" if result.get("max_time_min") else ""
    return f"{done} of {planned} epochs, cut by the time cap{cap}"
