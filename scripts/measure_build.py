"""Measure a dataset build command: wall time, peak memory of its whole process tree, bytes on disk, exit status.

    python scripts/measure_build.py --label NAME --disk PATH [--json OUT.jsonl] [--interval 0.1] -- COMMAND...

runs ``COMMAND`` (stdin from /dev/null: a prompt fails instead of hanging; stdout and stderr pass through) and
prints one line per measurement, then appends them as one JSON record (a line) to ``--json``:

- ``wall_s``: from start to exit of ``COMMAND``.
- ``peak_pss_bytes``: the maximum over time of the sum of PSS (proportional set size, ``Pss`` of
  ``/proc/PID/smaps_rollup``) over ``COMMAND`` and all its descendants, sampled every ``--interval`` seconds. PSS
  splits each shared page among the processes that map it, so the sum counts a page shared by several processes of
  the tree (a memory-mapped dataset read by DataLoader workers, the pages of a forked parent) once, where a sum of
  RSS would count it once per process. Being sampled, it can miss a peak shorter than the interval.
- ``peak_rss_bytes``: the peak RSS of the largest single process of the tree: the kernel's high-water mark
  (``VmHWM`` of ``/proc/PID/status``, sampled, and ``ru_maxrss`` of ``wait4``, exact for ``COMMAND`` and the
  descendants it waited for).
- ``disk_bytes``: the sum of the sizes of the files under ``--disk`` (a folder, recursively, nothing excluded; or
  one file) after ``COMMAND`` exits; 0 when it does not exist.
- ``exit_status``: ``COMMAND``'s (negative: killed by that signal); this script exits with it too (128 + signal).

Descendants are found by scanning ``/proc/*/stat`` for parent ids; this process makes itself a child subreaper, so a
descendant whose parent exits stays in the tree. Linux only; no psutil needed.

Measuring OGB's PCQM4Mv2 processing against ours on a replica (see ``scripts/make_pcqm4mv2_replica.py`` and
``scripts/ogb_pcqm4mv2_process.py``; use two roots so that the processed caches stay apart)::

    python scripts/make_pcqm4mv2_replica.py /data/replica-ogb
    python scripts/measure_build.py --label ogb-pcqm4mv2 --json build.jsonl \\
        --disk /data/replica-ogb/pcqm4m-v2/processed -- python scripts/ogb_pcqm4mv2_process.py /data/replica-ogb

To measure OGB on a fraction of the full size (when the full size does not fit in memory or time), make a smaller
replica with ``make_pcqm4mv2_replica.py ROOT --rows N`` (OGB's split sizes are scaled to N) and scale the numbers
by 3,746,620 / N, saying so: OGB holds every graph in one Python list, so its time and peak memory grow about
linearly in the rows.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
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


def descendants(pid: int) -> list[int]:
    """All processes below ``pid`` (not ``pid`` itself)."""
    children = _children_map()
    found, stack = [], list(children.get(pid, ()))
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


def sample(pids: list[int]) -> tuple[int, int, int]:
    """(sum of PSS, largest VmHWM, number of live processes) over ``pids``."""
    pss_sum = hwm_max = live = 0
    for pid in pids:
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


def measure(label: str, command: list[str], disk: Path, interval: float = 0.1) -> Measurement:
    """Run ``command`` and measure it (see the module docstring). The process tree is everything below this process
    after the command starts, so call it from a process with no other children running."""
    if interval <= 0:
        raise ValueError(f"--interval must be positive, got {interval}")
    result = Measurement(label, list(command), interval_s=interval, disk_path=str(disk),
                         started_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                         load_average_before=_load_average())
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    done = threading.Event()
    waited: dict = {}

    def wait() -> None:  # wait4 gives the exact ru_maxrss of the command and its waited-for descendants
        _, status, usage = os.wait4(proc.pid, 0)
        waited.update(end=time.perf_counter(), status=status, maxrss=usage.ru_maxrss * 1024)
        done.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    me = os.getpid()
    while not done.is_set():
        pss, hwm, live = sample(descendants(me))
        result.peak_pss_bytes = max(result.peak_pss_bytes, pss)
        result.peak_rss_bytes = max(result.peak_rss_bytes, hwm)
        result.peak_processes = max(result.peak_processes, live)
        result.samples += 1
        done.wait(interval)
    waiter.join()
    proc.returncode = os.waitstatus_to_exitcode(waited["status"])  # reaped by wait4: Popen must not wait again
    result.wall_s = waited["end"] - start
    result.peak_rss_bytes = max(result.peak_rss_bytes, waited["maxrss"])
    result.exit_status = proc.returncode
    result.disk_bytes = disk_usage(disk)
    result.load_average_after = _load_average()
    return result


def _load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _become_subreaper() -> None:
    """Orphaned descendants of the command get re-parented to this process (not init), so they stay measured."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: descendants whose parent exits are not measured
        pass


def _reap_orphans() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _human(n: int) -> str:
    return f"{n:,} bytes ({n / 2**30:.2f} GiB)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.exit("error: give the command to measure after '--', e.g. "
                 "measure_build.py --label x --disk DIR -- python build.py")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="%(prog)s --label NAME --disk PATH [--json OUT] [--interval S] "
                                           "-- COMMAND...")
    parser.add_argument("--label", required=True, help="name of this measurement in the output")
    parser.add_argument("--disk", type=Path, required=True, help="folder (or file) whose bytes to count afterwards")
    parser.add_argument("--json", type=Path, default=None, help="append the record as one JSON line to this file")
    parser.add_argument("--interval", type=float, default=0.1, help="memory sampling interval in seconds")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]

    _become_subreaper()
    try:
        result = measure(args.label, command, args.disk, args.interval)
    except (ValueError, FileNotFoundError, PermissionError) as error:
        sys.exit(f"error: {error}")
    _reap_orphans()
    tag = f"[{result.label}]"
    print(f"{tag} wall_s {result.wall_s:.2f}")
    print(f"{tag} peak_pss_bytes {_human(result.peak_pss_bytes)}: process tree, sum of PSS, "
          f"{result.samples} samples every {result.interval_s} s, up to {result.peak_processes} processes")
    print(f"{tag} peak_rss_bytes {_human(result.peak_rss_bytes)}: largest single process")
    print(f"{tag} disk_bytes {_human(result.disk_bytes)} under {result.disk_path}")
    print(f"{tag} exit_status {result.exit_status}")
    print(f"{tag} load_average {result.load_average_before} before, {result.load_average_after} after, "
          f"on {result.cpus} CPUs")
    if args.json is not None:
        with open(args.json, "a") as f:
            f.write(json.dumps(asdict(result)) + "\n")
    code = result.exit_status
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
