r"""The one way the toolkit writes files: run folders, bench folders, stores, caches, raw files, reports, pictures and
exports all go through this module.

- :func:`atomic_write` (and :func:`write_text`, :func:`write_bytes`, :func:`write_json`, :func:`save_figure`,
  :func:`copy_file`, or :func:`exclusive_temporary` for a library that writes to a path, such as ``torch.save``)
  writes into a fresh temporary file beside the target, created exclusively (``mkstemp``: ``O_CREAT | O_EXCL``, an
  unpredictable name, so a file or link planted in advance is never opened), and renames it onto the target when
  the block succeeds. The rename replaces a link planted at the target itself instead of following it; readers see
  the old file or the new one, never half of one; a failed or killed write leaves the old file untouched.
- :func:`temporary_folder` does the same for a whole folder (a store): written under a fresh private name, renamed
  into place when complete.
- :func:`append_to` opens a log for appending with ``O_NOFOLLOW`` and refuses anything but a regular file with one
  link (a planted symbolic or hard link to another file).
- :func:`hold_lock` takes an exclusive ``flock`` on a lock file, opened with ``O_NOFOLLOW``; it refuses anything but
  a regular file that is empty or holds a gea-graph holder line, and never truncates any other file. It either
  fails at once naming the holder (a run folder: :class:`LockError`) or waits for it with a message (a data root's
  build lock, :func:`build_lock`).
- :func:`ensure_folder` creates folders and refuses a symbolic link where the toolkit's own sub-folder should be.

Files and folders get the permissions the umask gives (``0o666 & ~umask``, ``0o777 & ~umask``, as ``open`` and
``mkdir`` would), not ``mkstemp``'s private ``0o600`` / ``0o700``: a lab's shared data root stays readable to the
group when the umask says so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os
import os.path as osp
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

PathLike = str | os.PathLike

#: Temporary files older than this are stale even when their writer's pid is alive (pids are reused; other hosts).
STALE_AFTER_S = 24 * 3600
#: What a lock file holds while it is held (and nothing once released).
_HOLDER = re.compile(r"pid \d+ on \S+ since [\d: -]+")


class UnsafeFileError(OSError):
    r"""A path where the toolkit would write is a symbolic link, a hard link to another file, or not a regular file
    (the message names the path and what to do)."""

    def __init__(self, code: int, message: str, path: str) -> None:
        super().__init__(code, message, path)

    def __str__(self) -> str:
        return str(self.strerror)


class LockError(RuntimeError):
    r"""A lock is held by another process (the message names the holder), or its file is not a lock file."""


# -- permissions -----------------------------------------------------------------------------------------------------


def current_umask() -> int:
    r"""The process's umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # the only portable way to read it: set and restore
    os.umask(mask)
    return mask


def file_mode() -> int:
    r"""The mode ``open`` gives a new file under the current umask."""
    return 0o666 & ~current_umask()


def folder_mode() -> int:
    r"""The mode ``mkdir`` gives a new folder under the current umask."""
    return 0o777 & ~current_umask()


# -- files -----------------------------------------------------------------------------------------------------------


def _temporary_name(path: str) -> tuple[int, str]:
    # mkstemp creates the file 0o600: it gets the umask's mode at once, through its descriptor.
    folder, name = osp.split(osp.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-{os.getpid()}-", dir=folder)
    os.fchmod(fd, file_mode())
    return fd, tmp


def _refuse_folder_at(path: str) -> None:
    if osp.isdir(path) and not osp.islink(path):
        raise IsADirectoryError(errno.EISDIR, f"{path} is a folder; give a file name", path)


@contextlib.contextmanager
def exclusive_temporary(path: PathLike) -> Iterator[str]:
    r"""A fresh temporary file beside :obj:`path`, for a library that writes to a path (``torch.save``,
    ``np.savez``): created exclusively (never a file or link planted in advance), given the umask's permissions and
    renamed onto :obj:`path` when the block succeeds; removed otherwise.

    Its name ``.<name>.tmp-<pid>-<random>`` tells :func:`clean_stale_temporaries` whose it is.
    """
    path = str(path)
    _refuse_folder_at(path)
    fd, tmp = _temporary_name(path)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if osp.lexists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "w", encoding: str | None = "utf-8", newline: str | None = None,
                 fsync: bool = False) -> Iterator[IO[Any]]:
    r"""An open file (``mode`` ``"w"`` text or ``"wb"`` binary) that becomes :obj:`path` when the block succeeds
    (see :func:`exclusive_temporary`); nothing at :obj:`path` changes when it fails. With :obj:`fsync`, its bytes
    reach the disk before the rename (for large files that are costly to make again)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode must be 'w' or 'wb', got {mode!r}")
    path = str(path)
    _refuse_folder_at(path)
    fd, tmp = _temporary_name(path)
    try:
        binary = mode == "wb"
        with os.fdopen(fd, mode, **({} if binary else {"encoding": encoding, "newline": newline})) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if osp.lexists(tmp):
            os.unlink(tmp)


def write_text(path: PathLike, text: str, encoding: str = "utf-8") -> None:
    r"""Writes :obj:`text` to :obj:`path` atomically (:func:`atomic_write`)."""
    with atomic_write(path, "w", encoding=encoding, newline="") as f:
        f.write(text)


def write_bytes(path: PathLike, data: bytes) -> None:
    r"""Writes :obj:`data` to :obj:`path` atomically (:func:`atomic_write`)."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_json(path: PathLike, obj: Any, indent: int | None = 2) -> None:
    r"""Writes :obj:`obj` as JSON (and a final newline) to :obj:`path` atomically."""
    write_text(path, json.dumps(obj, indent=indent) + "\n")


def save_figure(fig: Any, path: PathLike, **kwargs: Any) -> None:
    r"""``fig.savefig`` to :obj:`path` atomically; the format is the path's suffix (``.png``, ``.svg``, ``.pdf``)."""
    fmt = osp.splitext(str(path))[1].lstrip(".").lower() or "png"
    with exclusive_temporary(path) as tmp:
        fig.savefig(tmp, format=fmt, **kwargs)


def copy_file(source: PathLike, path: PathLike) -> None:
    r"""Copies the file :obj:`source` to :obj:`path` atomically."""
    with exclusive_temporary(path) as tmp:
        shutil.copyfile(source, tmp)


def _check_regular(fd: int, path: str, what: str) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFileError(errno.EINVAL, f"{path} is not a regular file; gea-graph writes {what} only into one "
                                            f"it created: remove it", path)
    if info.st_nlink != 1:
        raise UnsafeFileError(errno.EMLINK, f"{path} is a hard link to another file ({info.st_nlink} names); "
                                            f"gea-graph never writes through links: remove it", path)
    return info


def _open_no_follow(path: str, flags: int, what: str) -> int:
    # O_NONBLOCK: opening a FIFO planted there must fail (or be refused below), never wait for a reader
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeFileError(errno.ELOOP, f"{path} is a symbolic link; gea-graph never writes {what} through "
                                               f"links: remove it", path) from None
        if err.errno == errno.ENXIO:
            raise UnsafeFileError(errno.ENXIO, f"{path} is not a regular file; gea-graph writes {what} only into "
                                               f"one it created: remove it", path) from None
        raise
    os.set_blocking(fd, True)
    return fd


def append_to(path: PathLike, encoding: str = "utf-8") -> IO[str]:
    r"""Opens :obj:`path` for appending text (created with the umask's permissions when missing), with
    ``O_NOFOLLOW``; raises :class:`UnsafeFileError` for a symbolic link, a hard link or anything but a regular
    file (such a file is not touched)."""
    path = str(path)
    fd = _open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "a log")
    try:
        _check_regular(fd, path, "a log")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "a", encoding=encoding, newline="")


# -- folders ---------------------------------------------------------------------------------------------------------


def ensure_folder(path: PathLike, within: PathLike | None = None) -> str:
    r"""Creates the folder :obj:`path` (and its parents) with the umask's permissions. With :obj:`within` (a folder
    the user chose, such as ``--out``), every folder from :obj:`within` down to :obj:`path` must be a real folder:
    a symbolic link planted there (which would send the toolkit's files elsewhere) raises
    :class:`UnsafeFileError`."""
    path = osp.abspath(str(path))
    os.makedirs(path, exist_ok=True)
    if within is not None:
        top = osp.abspath(str(within))
        rel = osp.relpath(path, top)
        if rel.startswith(os.pardir):
            raise UnsafeFileError(errno.EINVAL, f"{path} is outside {top}", path)
        current = top
        for part in [] if rel == os.curdir else rel.split(os.sep):
            current = osp.join(current, part)
            if osp.islink(current):
                raise UnsafeFileError(errno.ELOOP, f"{current} is a symbolic link; gea-graph writes into its own "
                                                   f"folders only: remove it", current)
    return path


@contextlib.contextmanager
def temporary_folder(path: PathLike) -> Iterator[str]:
    r"""A fresh private folder beside :obj:`path` (``mkdtemp``) to fill; when the block succeeds it gets the
    umask's permissions and replaces :obj:`path` (a folder already there is removed first), else it is removed.
    Its name ``.<name>.tmp-<pid>-<random>`` tells :func:`clean_stale_temporaries` whose it is."""
    path = osp.abspath(str(path))
    tmp = tempfile.mkdtemp(prefix=f".{osp.basename(path)}.tmp-{os.getpid()}-", dir=osp.dirname(path))
    try:
        yield tmp
        os.chmod(tmp, folder_mode())
        move_into(tmp, path)
    finally:
        if osp.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def extracted_zip(archive: PathLike, beside: PathLike) -> Iterator[str]:
    r"""The zip :obj:`archive` extracted into a fresh private folder in the folder :obj:`beside` (nothing planted
    there can be written through); the caller renames what it keeps out of it with :func:`move_into`; the rest is
    removed after the block. (``zipfile`` drops absolute paths and ``..`` from member names.)"""
    import zipfile

    folder = ensure_folder(beside)
    tmp = tempfile.mkdtemp(prefix=f".{osp.basename(str(archive))}.tmp-{os.getpid()}-", dir=folder)
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def move_into(source: PathLike, path: PathLike) -> None:
    r"""Renames the file or folder :obj:`source` to :obj:`path`, replacing what is there (a folder is removed
    first; a link is removed, never followed)."""
    path = str(path)
    if osp.islink(path) or osp.isfile(path):
        os.unlink(path)
    elif osp.isdir(path):
        shutil.rmtree(path)
    os.replace(source, path)


def discard_stdout() -> None:
    r"""Points this process's standard output at the null device: once its reader has gone (a closed pipe), what is
    still buffered, and the interpreter's last flush, go nowhere instead of raising ``BrokenPipeError``."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# -- locks -----------------------------------------------------------------------------------------------------------


def _holder_line() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"


def _open_lock(path: str) -> tuple[int, bool]:
    r"""The lock file's descriptor (read-write when allowed, else read-only: ``flock`` needs no write access, so a
    colleague's lock in a shared data root still works), after checking it is a lock file."""
    try:
        fd, writable = _open_no_follow(path, os.O_RDWR | os.O_CREAT, "a lock"), True
    except PermissionError:
        fd, writable = _open_no_follow(path, os.O_RDONLY, "a lock"), False
    try:
        info = _check_regular(fd, path, "a lock")
        text = os.pread(fd, 4096, 0).decode(errors="replace").strip() if info.st_size < 4096 else None
        if text is None or (text and not _HOLDER.fullmatch(text)):
            raise UnsafeFileError(errno.EINVAL, f"{path} is not a gea-graph lock file (it holds other data); "
                                                f"gea-graph never overwrites it: move it away", path)
    except BaseException:
        os.close(fd)
        raise
    return fd, writable


@contextlib.contextmanager
def hold_lock(path: PathLike, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    r"""Holds an exclusive ``flock`` on the lock file :obj:`path` for the block (released by the kernel when the
    process dies); while held, the file names the holder (pid, host, start time).

    When another process holds it: without :obj:`on_wait`, raises :class:`LockError` naming the holder; with it,
    calls ``on_wait(holder)`` once and waits for the lock. Raises :class:`UnsafeFileError` (and touches nothing)
    when :obj:`path` is a symbolic or hard link or not a lock file.
    """
    path = str(path)
    fd, writable = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            if on_wait is None:
                raise LockError(f"{path} is held by {holder}") from None
            on_wait(holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        if writable:  # our own lock file (checked above): its holder line is replaced
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder_line().encode(), 0)
        try:
            yield
        finally:
            if writable:
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _say_waiting(what: str) -> Callable[[str], None]:
    def say(holder: str) -> None:
        print(f"gea-graph: {what} is being built by {holder}; waiting for it to finish (its result is reused)",
              file=sys.stderr, flush=True)
    return say


#: Build locks this process holds (path -> depth): a build inside a build of the same folder does not wait for
#: itself (``flock`` locks of two descriptors of one process exclude each other).
_HELD_BUILDS: dict[str, int] = {}


@contextlib.contextmanager
def build_lock(folder: PathLike, what: str | None = None) -> Iterator[None]:
    r"""The build lock of a dataset folder in a data root (``<folder>/.build.lock``): one process builds at a time;
    a second one prints whose build it waits for (on stderr), waits, and then finds (and reuses) the result.
    Re-entrant within a process."""
    path = osp.join(ensure_folder(folder), ".build.lock")
    if _HELD_BUILDS.get(path):
        _HELD_BUILDS[path] += 1
        try:
            yield
        finally:
            _HELD_BUILDS[path] -= 1
        return
    with hold_lock(path, on_wait=_say_waiting(what or str(folder))):
        _HELD_BUILDS[path] = 1
        try:
            yield
        finally:
            del _HELD_BUILDS[path]


# -- clean-up --------------------------------------------------------------------------------------------------------


def clean_stale_temporaries(folder: PathLike) -> list[str]:
    r"""Removes the temporary files and folders of :func:`exclusive_temporary` and :func:`temporary_folder` in
    :obj:`folder` left by a killed writer (its pid is gone, or the file is older than :data:`STALE_AFTER_S`);
    returns their paths."""
    removed = []
    # also the names of earlier versions, "<name>.tmp-<pid>" (glob's "*" skips dot files, hence two patterns)
    for tmp in glob.glob(osp.join(str(folder), ".*.tmp-*")) + glob.glob(osp.join(str(folder), "*.tmp-*")):
        try:
            pid = int(tmp.rsplit(".tmp-", 1)[1].split("-", 1)[0])
        except ValueError:
            continue
        try:
            alive = pid != os.getpid() and _pid_alive(pid)
            if not alive or time.time() - os.lstat(tmp).st_mtime > STALE_AFTER_S:
                if osp.isdir(tmp) and not osp.islink(tmp):
                    shutil.rmtree(tmp, ignore_errors=True)
                else:
                    os.unlink(tmp)
                removed.append(tmp)
        except FileNotFoundError:  # removed meanwhile by its writer
            continue
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
