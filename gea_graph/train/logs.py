r"""Lightning's CSV log of a run, kept consistent with ``metrics.csv`` across a kill and ``--resume``, and the run's
own per-epoch table ``metrics.csv``."""
from __future__ import annotations

import contextlib
import csv
import logging
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from gea_graph.io import append_to, atomic_write

METRICS_FILE = "metrics.csv"

#: Lightning's loggers of start-up banners: "GPU available", "TPU available", the advertisement for its cloud logger,
#: the DDP set-up banner, "`Trainer.fit` stopped: `max_epochs=8` reached".
BANNER_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                  "lightning.fabric.utilities.distributed", "lightning.pytorch.accelerators.cuda")
#: Warnings about Lightning's own code, not the run (torch deprecates a pytree class Lightning still uses).
LIBRARY_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",)
#: Warnings that a resumed run makes by design: its checkpoints folder already holds its checkpoints.
RESUME_WARNINGS = (r"Checkpoint directory .* exists and is not empty",)


@contextlib.contextmanager
def lightning_banners(shown: bool, resuming: bool = False) -> Iterator[None]:
    r"""Hides Lightning's start-up banners (:data:`BANNER_LOGGERS`, below their ``WARNING`` level), the warnings
    about its own code (:data:`LIBRARY_WARNINGS`) and, when :obj:`resuming`, those a resume into its own folder makes
    (:data:`RESUME_WARNINGS`) for the block, unless :obj:`shown` (``--verbose``). Warnings about the run itself (a
    missing logger, a slow data loader) are left as they are."""
    if shown:
        yield
        return
    loggers = [logging.getLogger(name) for name in BANNER_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        for pattern in LIBRARY_WARNINGS + (RESUME_WARNINGS if resuming else ()):
            warnings.filterwarnings("ignore", message=pattern)
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


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

