"""Raw files: find them in the mirror or download them, and check their MD5 before use."""

from __future__ import annotations

import gzip
import hashlib
import urllib.request
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tqdm.auto import tqdm

from gea_graph.data.config import PathLike, mirror_root
from gea_graph.io import atomic_write, clean_stale_temporaries, ensure_folder


class RawFileError(RuntimeError):
    """A raw file is missing, has the wrong MD5, or is corrupt."""


@dataclass(frozen=True)
class RawFile:
    """One raw file of a dataset.

    Args:
        name: File name inside the dataset's ``raw`` folder (and inside its mirror sub-folder).
        url: Public source URL.
        md5: Expected MD5 hex digest, or :obj:`None` where the source publishes none (then a warning says the file
            is unchecked).
        mirror_dir: Sub-folder of the mirror holding the file (``$GEA_GRAPH_MIRROR/<mirror_dir>/<name>``).
    """

    name: str
    url: str
    md5: str | None
    mirror_dir: str


def file_digest(path: PathLike, algorithm: str = "md5", chunk: int = 1 << 20) -> str:
    """Hex digest of a file's contents (``algorithm``: a :mod:`hashlib` name), read in chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def md5sum(path: PathLike) -> str:
    """MD5 hex digest of a file."""
    return file_digest(path, "md5")


def check_md5(path: PathLike, raw: RawFile) -> None:
    """Raises :class:`RawFileError` unless :obj:`path` has the MD5 recorded for :obj:`raw`."""
    _check_digest(md5sum(path) if raw.md5 is not None else None, raw, str(path))


def _check_digest(actual: str | None, raw: RawFile, what: str) -> None:
    if raw.md5 is None:
        warnings.warn(f"{what}: no published MD5 for {raw.name}; the file is used unchecked", stacklevel=3)
        return
    if actual != raw.md5:
        raise RawFileError(
            f"MD5 mismatch for {what}: expected {raw.md5}, got {actual}. The file is truncated, corrupt or a "
            f"different version. Fix: delete it and run again to re-fetch it from {raw.url} (if it came from the "
            f"mirror $GEA_GRAPH_MIRROR, replace the mirror's copy with a fresh download).")


def fetch(raw: RawFile, raw_dir: PathLike) -> Path:
    """Makes :obj:`raw` available as ``raw_dir/raw.name`` with the right MD5 and returns its path.

    A file already there is checked and kept. Otherwise it is copied from the mirror (``$GEA_GRAPH_MIRROR``) when the
    mirror has it, else downloaded from ``raw.url``. The copy or download goes to an exclusively created temporary
    file (:func:`gea_graph.io.atomic_write`: a file or link planted at a guessable name is never followed),
    hashed as it is written, and renamed into place only when its MD5 matches, so a bad or partial file never sits
    under the real name.
    """
    raw_dir = Path(raw_dir)
    target = raw_dir / raw.name
    if target.exists():
        check_md5(target, raw)
        return target
    ensure_folder(raw_dir)
    clean_stale_temporaries(raw_dir)
    mirror = mirror_root()
    source = mirror / raw.mirror_dir / raw.name if mirror is not None else None
    with atomic_write(target, "wb") as f:
        if source is not None and source.exists():
            with open(source, "rb") as src:
                digest = _copy(src, f, raw.name, source.stat().st_size)
            where: PathLike = source
        else:
            digest = _download(raw.url, f, raw.name)
            where = raw.url
        _check_digest(digest, raw, f"{raw.name} (from {where})")
    return target


def _copy(src: BinaryIO, dst: BinaryIO, name: str, total: int | None, verb: str = "copy") -> str:
    """Copies :obj:`src` to :obj:`dst` in blocks behind a progress bar; returns the MD5 of the bytes."""
    digest = hashlib.md5()
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"{verb} {name}", disable=total is not None
              and total < 1 << 26) as bar:
        for block in iter(lambda: src.read(1 << 20), b""):
            dst.write(block)
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def _download(url: str, dst: BinaryIO, name: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return _copy(response, dst, name, int(response.headers.get("Content-Length") or 0) or None, "download")
    except OSError as err:
        raise RawFileError(
            f"could not download {url} ({err}). If this machine is offline, point $GEA_GRAPH_MIRROR at a folder "
            f"holding the dataset's raw files (laid out as shared/data).") from err


def check_gzip(path: PathLike) -> None:
    """Reads a gzip file to its end; raises :class:`RawFileError` naming the file if it is truncated or corrupt."""
    try:
        with gzip.open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    except (EOFError, OSError, zlib.error) as err:
        raise RawFileError(
            f"{path} is not a complete gzip file ({err}): it is truncated or corrupt. Fix: delete it and run again "
            f"to re-fetch it (or replace the mirror's copy).") from None
