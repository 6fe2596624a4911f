r"""The run lock: one process at a time trains into a run directory."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from gea_graph.io import LockError, ensure_folder, hold_lock

LOCK_FILE = ".lock"


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

