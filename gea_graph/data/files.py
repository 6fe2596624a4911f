"""Writing files safely: exclusively created temporary files renamed into place, and the clean-up of those a killed
writer left behind."""

from __future__ import annotations

import contextlib
import glob
import os
import os.path as osp
import tempfile
import time
from collections.abc import Iterator

from gea_graph.data.config import PathLike

#: Temporary files older than this are stale even when their writer's pid is alive (pids are reused; other hosts).
STALE_AFTER_S = 24 * 3600


@contextlib.contextmanager
def exclusive_temporary(path: PathLike) -> Iterator[str]:
    """A fresh temporary file beside :obj:`path`, created exclusively (``O_EXCL``, unpredictable name, never a file
    or link planted in advance), renamed onto :obj:`path` when the block succeeds and removed otherwise.

    Its name ``.<name>.tmp-<pid>-<random>`` tells :func:`clean_stale_temporaries` whose it is.
    """
    path = str(path)
    folder, name = osp.split(osp.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-{os.getpid()}-", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if osp.lexists(tmp):
            os.unlink(tmp)


def clean_stale_temporaries(folder: PathLike) -> list[str]:
    """Removes the temporary files of :func:`exclusive_temporary` in :obj:`folder` left by a killed writer (its pid
    is gone, or the file is older than :data:`STALE_AFTER_S`); returns their paths."""
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
