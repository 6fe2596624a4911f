r"""The Lightning callbacks and plugins of a run: ``metrics.csv`` after each validation, the pause (``--stop-after``),
the end at the time cap, BatchNorm over the global batch, and a checkpoint callback for run directories that move."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.layer_sync import LayerSync

from gea_graph.nn import DistributedBatchNorm
from gea_graph.train.logs import write_metrics
from gea_graph.train.module import GraphTask, time_cap


class MetricsWriter(Callback):
    r"""Rewrites ``metrics.csv`` (atomically) from the module's history after every validation (rank 0)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_validation_end(self, trainer: L.Trainer, pl_module: GraphTask) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or not pl_module.history:
            return
        write_metrics(self.path, pl_module.history)



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
    (well past the cap where an evaluation is long, as on the deep tree recipes; with ``optim.horizon: time`` that
    step's learning rate is already 0). Process 0 decides and the others follow."""

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


class EpochLine(Callback):
    r"""Prints one line per epoch on the main process, as GraphGPS does: the epoch (1-based, of the planned ones),
    the training loss, the validation and test metric and the epoch's seconds, e.g.
    ``geaet-zinc-quick seed 0: epoch 3/8  train loss 0.5123  val mae 0.4431  test mae 0.4512  41.2 s``."""

    def __init__(self, label: str) -> None:
        self.label = label

    def on_validation_end(self, trainer: L.Trainer, pl_module: GraphTask) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or not pl_module.history:
            return
        row = pl_module.history[-1]
        metric = pl_module.metric_name
        print(f"{self.label}: epoch {int(row['epoch']) + 1}/{trainer.max_epochs}  train loss {row['train_loss']:.4f}"
              f"  val {metric} {row['val']:.4f}  test {metric} {row['test']:.4f}  {row['time']:.1f} s", flush=True)
