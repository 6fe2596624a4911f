r"""Measure a command (a dataset build): wall time, peak memory of its whole process tree, bytes on disk, exit status.
Command line: ``scripts/measure_build.py``; used by the ``scale`` group of ``gea-graph perf``
(:mod:`gea_graph.bench.perf.scale`).

:func:`measure` runs the command (stdin from /dev/null: a prompt fails instead of hanging; stdout and stderr pass
through) and returns a :class:`Measurement`:

- ``wall_s``: from start to exit of the command.
- ``peak_pss_bytes``: the maximum over time of the sum of PSS (proportional set size, ``Pss`` of
  ``/proc/PID/smaps_rollup``) over the command and all its descendants, sampled every ``interval`` seconds. PSS
  splits each shared page among the processes that map it, so the sum counts a page shared by several processes of
  the tree (a memory-mapped dataset read by DataLoader workers, the pages of a forked parent) once, where a sum of
  RSS would count it once per process. Being sampled, it can miss a peak shorter than the interval.
- ``peak_rss_bytes``: the peak RSS of the largest single process of the tree: the kernel's high-water mark
  (``VmHWM`` of ``/proc/PID/status``, sampled: exact since the process started its program, but growth in the last
  ``interval`` before a process exits is missed) and ``ru_maxrss`` of ``wait4`` (exact for the command and the
  descendants it waited for) where that exceeds this process's own ``VmHWM`` after the command exits: Linux
  carries ``ru_maxrss`` over from the parent across fork and exec, so below that mark it may be this process's
  size, not the command's.
- ``disk_bytes``: the sum of the sizes of the files under ``disk`` (a folder, recursively, nothing excluded; or one
  file) after the command exits; 0 when it does not exist.
- ``exit_status``: the command's (negative: killed by that signal).

Descendants are found by scanning ``/proc/*/stat`` for parent ids; children of this process that were running before
the command started are left out with their subtrees, and so is a child caught between fork and exec (it still has
this process's command line, memory and VmHWM). A descendant whose parent exits before it is re-parented away
from the tree (and no longer counted) unless this process is a child subreaper (:func:`become_subreaper`, what
``scripts/measure_build.py`` does). Linux only; no psutil needed.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import subprocess
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


@dataclass
class Measurement:
    """One measured run of a command (sizes in bytes, times in seconds)."""

    label: str
    command: list[str]
    wall_s: float = 0.0
    peak_pss_bytes: int = 0
    peak_rss_bytes: int = 0
    disk_bytes: int = 0
    disk_path: str = ""
    exit_status: int = 0
    peak_processes: int = 0
    samples: int = 0
    interval_s: float = 0.1
    started_utc: str = ""
    cpus: int = field(default_factory=lambda: os.cpu_count() or 0)
    load_average_before: list[float] = field(default_factory=list)
    load_average_after: list[float] = field(default_factory=list)


def _children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process visible in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        # Fields after the command name, which is in parentheses and may itself hold spaces or ')'.
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def descendants(pid: int, skip: Collection[int] = ()) -> list[int]:
    """All processes below ``pid`` (not ``pid`` itself), leaving out the subtrees of the processes in ``skip``."""
    children = _children_map()
    found, stack = [], [child for child in children.get(pid, ()) if child not in skip]
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(children.get(child, ()))
    return found


def _kib_field(path: str, name: bytes) -> int | None:
    """The ``name: N kB`` field of a /proc file, in bytes; None when the process is gone (or is a zombie)."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(name):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _cmdline(pid: int | str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return None


def sample(pids: list[int], not_yet_exec: bytes | None = None) -> tuple[int, int, int]:
    """(sum of PSS, largest VmHWM, number of live processes) over ``pids``, leaving out those whose command line is
    ``not_yet_exec``: a child between fork and exec still runs its parent's program in (a copy of) its parent's
    memory, so its VmHWM is the parent's."""
    pss_sum = hwm_max = live = 0
    for pid in pids:
        if not_yet_exec is not None and _cmdline(pid) == not_yet_exec:
            continue
        pss = _kib_field(f"/proc/{pid}/smaps_rollup", b"Pss:")
        if pss is None:
            continue
        live += 1
        pss_sum += pss
        hwm_max = max(hwm_max, _kib_field(f"/proc/{pid}/status", b"VmHWM:") or 0)
    return pss_sum, hwm_max, live


def disk_usage(path: Path) -> int:
    """Sum of the sizes of the files under ``path`` (recursive, symlinks not followed), or of ``path`` itself."""
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size if os.path.lexists(path) else 0
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                pass
    return total


def measure(label: str, command: Sequence[str], disk: str | os.PathLike, interval: float = 0.1,
            env: Mapping[str, str] | None = None) -> Measurement:
    """Run ``command`` (with the environment ``env``, default this process's) and measure it (see the module
    docstring). The process tree is everything below this process that was not already running when the command
    started, so no other child should start while it runs."""
    if interval <= 0:
        raise ValueError(f"interval must be positive, got {interval}")
    disk = Path(disk)
    result = Measurement(label, list(command), interval_s=interval, disk_path=str(disk),
                         started_utc=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                         load_average_before=load_average())
    me = os.getpid()
    mine = _cmdline("self")
    already = set(_children_map().get(me, ()))  # e.g. a data loader's workers: not the command's
    start = time.perf_counter()
    proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, env=None if env is None else dict(env))
    done = threading.Event()
    waited: dict = {}

    def wait() -> None:  # wait4 gives the exact ru_maxrss of the command and its waited-for descendants
        _, status, usage = os.wait4(proc.pid, 0)
        waited.update(end=time.perf_counter(), status=status, maxrss=usage.ru_maxrss * 1024)
        done.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    while not done.is_set():
        pss, hwm, live = sample(descendants(me, skip=already), not_yet_exec=mine)
        result.peak_pss_bytes = max(result.peak_pss_bytes, pss)
        result.peak_rss_bytes = max(result.peak_rss_bytes, hwm)
        result.peak_processes = max(result.peak_processes, live)
        result.samples += 1
        done.wait(interval)
    waiter.join()
    proc.returncode = os.waitstatus_to_exitcode(waited["status"])  # reaped by wait4: Popen must not wait again
    result.wall_s = waited["end"] - start
    # The command's ru_maxrss starts from this process's VmHWM at the fork, which only grows: read it now.
    inherited = _kib_field("/proc/self/status", b"VmHWM:") or 0
    if waited["maxrss"] > inherited:
        result.peak_rss_bytes = max(result.peak_rss_bytes, waited["maxrss"])
    result.exit_status = proc.returncode
    result.disk_bytes = disk_usage(disk)
    result.load_average_after = load_average()
    return result


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded to two decimals."""
    return [round(x, 2) for x in os.getloadavg()]


def become_subreaper() -> None:
    """Orphaned descendants of a measured command get re-parented to this process (not init), so they stay measured.
    For a process that runs nothing else: it must then reap them (:func:`reap_orphans`)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: descendants whose parent exits are not measured
        pass


def reap_orphans() -> None:
    """Reap every exited child (orphans re-parented by :func:`become_subreaper`), without waiting."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
