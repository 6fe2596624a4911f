"""Raw files: find them in the mirror or download them, and check their MD5 before use."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import urllib.request
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from gea_graph.data.config import PathLike, mirror_root
from gea_graph.data.files import clean_stale_temporaries, exclusive_temporary


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
    if raw.md5 is None:
        warnings.warn(f"{path}: no published MD5 for {raw.name}; the file is used unchecked", stacklevel=2)
        return
    actual = md5sum(path)
    if actual != raw.md5:
        raise RawFileError(
            f"MD5 mismatch for {path}: expected {raw.md5}, got {actual}. The file is truncated, corrupt or a "
            f"different version. Fix: delete it and run again to re-fetch it from {raw.url} (if it came from the "
            f"mirror $GEA_GRAPH_MIRROR, replace the mirror's copy with a fresh download).")


def fetch(raw: RawFile, raw_dir: PathLike) -> Path:
    """Makes :obj:`raw` available as ``raw_dir/raw.name`` with the right MD5 and returns its path.

    A file already there is checked and kept. Otherwise it is copied from the mirror (``$GEA_GRAPH_MIRROR``) when the
    mirror has it, else downloaded from ``raw.url``. The copy or download goes to a temporary name that is renamed
    into place only after its MD5 matches, so a bad or partial file never sits under the real name.
    """
    raw_dir = Path(raw_dir)
    target = raw_dir / raw.name
    if target.exists():
        check_md5(target, raw)
        return target
    raw_dir.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(raw_dir)
    mirror = mirror_root()
    source = mirror / raw.mirror_dir / raw.name if mirror is not None else None
    # An exclusively created temporary (a file or symlink planted at a guessable name is never followed), renamed
    # into place only after its MD5 matches.
    with exclusive_temporary(target) as tmp:
        if source is not None and source.exists():
            shutil.copyfile(source, tmp)
            where: PathLike = source
        else:
            _download(raw.url, Path(tmp), raw.name)
            where = raw.url
        try:
            check_md5(tmp, raw)
        except RawFileError as err:
            raise RawFileError(str(err).replace(str(tmp), f"{raw.name} (from {where})")) from None
    return target


def _download(url: str, path: Path, name: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(path, "wb") as f:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"download {name}") as bar:
                for block in iter(lambda: response.read(1 << 20), b""):
                    f.write(block)
                    bar.update(len(block))
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
