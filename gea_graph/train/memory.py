r"""Bounding the resident memory of a CPU training run.

A training step on CPU allocates and frees many tensors whose sizes change with every mini-batch (its node and edge
counts). glibc's allocator serves them from its heap and returns freed memory to the system only from the heap's top, so
the heap fragments and a long run keeps far more resident than it uses between steps. :class:`ReleaseFreeHeap` hands the
free pages inside the heap back (glibc's ``malloc_trim(0)``). Pages used again are faulted back in, which is what a
release costs, so it runs every :data:`TRIM_EVERY` steps, around each evaluation, and, where a recipe sets
``trainer.release_memory_above``, after any step, training or evaluation, that leaves the resident set above that many
MiB: a bound that pays only for the releases it needs. An evaluation needs the bound as much as training: without it,
the heap of a Peptides-func evaluation grows by hundreds of MiB of free memory. A recipe's
``trainer.release_memory_every`` sets the interval (``null``: none). At the same time the pages of the dataset's store
files leave the resident set (:func:`gea_graph.data.store.release_mapped_pages`); they stay in the page cache. The
library sets no process-wide allocator or heap setting (``docs/performance.md``, "Memory of a CPU run").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
from functools import cache
from typing import Any

from lightning.pytorch.callbacks import Callback

from gea_graph.data.store import release_mapped_pages

#: Training steps between two releases of the free heap.
TRIM_EVERY = 16


def peak_resident_mib() -> float:
    r"""The peak resident set size of this process since it started its program, in MiB: the kernel's high-water
    mark ``VmHWM`` of ``/proc/self/status`` on Linux. Not ``ru_maxrss``: Linux carries that over from the parent
    across fork and exec, so a run started by a large process (``gea-graph bench``, which builds the datasets in its
    own process first, or ``gea-graph perf``) would report at least that process's size. Elsewhere ``ru_maxrss``
    (bytes on macOS, KiB on the other systems)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** 20 if sys.platform == "darwin" else peak / 1024


def resident_mib() -> float | None:
    r"""The resident set size of this process now, in MiB (``/proc/self/statm``); ``None`` where the system has no
    such file (not Linux)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


@cache
def libc_function(name: str) -> Any:
    r"""The C library's function ``name`` (:mod:`ctypes`), or ``None`` where it has none."""
    library = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(library), name, None) if library else None
    except OSError:
        return None


def release_free_heap() -> bool:
    r"""Returns the free memory of the C heap to the system (glibc's ``malloc_trim(0)``); ``False`` where the C
    library has no such call (not glibc), ``True`` otherwise."""
    trim = libc_function("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


class ReleaseFreeHeap(Callback):
    r"""Calls :func:`release_free_heap` and :func:`~gea_graph.data.store.release_mapped_pages` every ``every`` training
    steps (``None``: never by the step count), after any step (training, validation or test) that leaves the
    resident set above ``above_mib`` MiB (:func:`resident_mib`; ``None``: no bound; no effect where the resident set
    cannot be read), and before and after each validation (see the module doc). Each process of a multi-process run
    decides for itself. On a GPU the tensors live in CUDA's caching allocator and the host heap stays small; the
    call is then cheap and harmless. :attr:`calls` counts the releases."""

    def __init__(self, every: int | None = TRIM_EVERY, above_mib: float | None = None) -> None:
        if every is not None and every < 1:
            raise ValueError(f"'every' must be >= 1 or None, got {every}")
        if above_mib is not None and not above_mib > 0:
            raise ValueError(f"'above_mib' must be > 0 or None, got {above_mib}")
        self.every = every
        self.above_mib = above_mib
        self.calls = 0

    def _release(self) -> None:
        release_mapped_pages()
        if release_free_heap():
            self.calls += 1

    def _above_bound(self) -> bool:
        if self.above_mib is None:
            return False
        resident = resident_mib()
        return resident is not None and resident > self.above_mib

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.every is not None and (batch_idx + 1) % self.every == 0 or self._above_bound():
            self._release()

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if self._above_bound():
            self._release()

    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        if self._above_bound():
            self._release()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._release()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._release()

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(every={self.every}, above_mib={self.above_mib})"
