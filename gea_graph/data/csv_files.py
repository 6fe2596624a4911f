r"""Reading CSV files of molecules: a bounded record reader (no CSV record longer than :data:`MAX_RECORD_BYTES` is
ever held, whatever the file holds), the header, and the errors that name the file and the line.

A record is a line, or several when a quoted cell holds line breaks (``"CC\nO"`` is one cell of one record). The
reader splits records on the raw bytes (counting quotes), so a 10 MB line costs its first
:data:`MAX_RECORD_BYTES` bytes of memory and is reported as one overlong row; the rows after it keep their places.
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO

from gea_graph.data.download import check_gzip, file_digest

#: The longest CSV record read whole (128 KiB, the field limit of Python's csv module). A SMILES within the size
#: bounds has at most 40,960 characters (10,000 by default); a longer record is an invalid row (``predict``) or a
#: one-line error (``MoleculeCSV``).
MAX_RECORD_BYTES = 1 << 17
_BOM = b"\xef\xbb\xbf"


def open_binary(path: str) -> IO[bytes]:
    r"""The file's bytes, unzipped when it ends in ``.gz`` (checked to be a whole gzip file first)."""
    if path.endswith(".gz"):
        check_gzip(path)
        return gzip.open(path, "rb")
    return open(path, "rb")


def records(stream: IO[bytes], limit: int = MAX_RECORD_BYTES) -> Iterator[tuple[bytes, int, int]]:
    r"""``(record, size, line)`` of each CSV record of a binary stream: its first :obj:`limit` bytes (line end
    dropped), its full size in bytes, and its first line number (1-based). Blank lines are skipped, as pandas
    does."""
    parts: list[bytes] = []
    kept = size = quotes = 0
    line = start_line = 1

    def finish() -> tuple[bytes, int, int] | None:
        record = b"".join(parts)
        if record.endswith(b"\r") and kept == size:
            record = record[:-1]
        return (record, size, start_line) if size and record not in (b"", b"\r") else None

    while block := stream.read(1 << 20):
        start = 0
        while True:
            end = block.find(b"\n", start)
            piece = block[start:] if end < 0 else block[start:end]
            quotes += piece.count(b'"')
            size += len(piece)
            if kept < limit:
                parts.append(piece[:limit - kept])
                kept += min(len(piece), limit - kept)
            if end < 0:
                break
            start = end + 1
            line += 1
            if quotes % 2:  # a line break inside a quoted cell: the record goes on
                size += 1
                if kept < limit:
                    parts.append(b"\n")
                    kept += 1
                continue
            done = finish()
            if done is not None:
                yield done
            parts, kept, size, quotes, start_line = [], 0, 0, 0, line
    done = finish()
    if done is not None:
        yield done


def _fields(record: bytes) -> list[str]:
    return next(csv.reader([record.decode("utf-8")]), [])


def read_header(path: str, option: str = "--csv") -> list[str]:
    r"""The column names of a CSV file (its first record).

    Raises:
        ValueError: naming :obj:`option` and the file, when it is empty, not UTF-8 or its header is overlong.
    """
    with open_binary(path) as stream:
        first = next(records(stream), None)
    if first is None:
        raise ValueError(f"{option} {path} is empty: expected a header line naming the columns")
    record, size, _ = first
    if size > MAX_RECORD_BYTES:
        raise ValueError(f"{option} {path}: its header line has {size:,} bytes, more than the {MAX_RECORD_BYTES:,} "
                         f"read; is it a CSV file?")
    try:
        return _fields(record.removeprefix(_BOM))
    except UnicodeDecodeError as err:
        raise ValueError(f"{option} {path} is not UTF-8 text (byte {record[err.start]:#04x} on line 1); save it "
                         f"as UTF-8") from None


@dataclass
class CSVChunk:
    r"""Consecutive data rows of a CSV file: the cells of the columns asked for (text, ``""`` when absent), and a
    reason for each row whose record could not be read whole (too long, not UTF-8), by position in the chunk."""

    columns: dict[str, list[str]]
    errors: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0


def read_chunks(path: str, columns: Sequence[str], size: int, limit: int = MAX_RECORD_BYTES) -> Iterator[CSVChunk]:
    r"""The data rows of a CSV file, :obj:`size` at a time, cells of :obj:`columns` only (all read as text). A record
    longer than :obj:`limit` bytes keeps its row, with the cells its first bytes hold and a reason; a record that
    is not UTF-8 keeps its row with empty cells and a reason."""
    header = read_header(path)
    where = [header.index(c) for c in columns]
    chunk = CSVChunk({c: [] for c in columns})
    with open_binary(path) as stream:
        rows = records(stream, limit)
        next(rows, None)  # the header
        for record, full, line in rows:
            position = len(chunk)
            reason = None
            try:
                fields = _fields(record)
            except UnicodeDecodeError as err:
                if full > limit:  # cut inside a character: read what precedes the cut
                    fields = next(csv.reader([record.decode("utf-8", "ignore")]), [])
                else:
                    fields, reason = [], f"line {line} is not UTF-8 text (byte {record[err.start]:#04x})"
            if full > limit:
                reason = (f"its CSV record (line {line}) has {full:,} bytes, more than the {limit:,} read; no "
                          f"SMILES within the size bounds is that long")
                fields[-1:] = [""]  # the cell the cut went through is not whole
            for name, i in zip(columns, where):
                chunk.columns[name].append(fields[i] if i < len(fields) else "")
            if reason is not None:
                chunk.errors[position] = reason
            if len(chunk) == size:
                yield chunk
                chunk = CSVChunk({c: [] for c in columns})
    if len(chunk):
        yield chunk


def first_non_utf8(path: str) -> str:
    r"""Where a file stops being UTF-8: ``byte 0xe9 on line 4`` (read only when pandas could not decode it)."""
    with open_binary(path) as f:
        data = f.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return f"byte {data[err.start]:#04x} on line {line}"
    return "an encoding error"


def check_record_lengths(path: str, limit: int = MAX_RECORD_BYTES) -> None:
    r"""Raises :class:`ValueError` naming the line when a record of the file is longer than :obj:`limit` bytes
    (before a whole-file reader such as pandas holds it)."""
    with open_binary(path) as stream:
        for record, full, line in records(stream, limit):
            if full > limit:
                raise ValueError(f"{path}: line {line} has {full:,} bytes, more than the {limit:,} a CSV record "
                                 f"may have; no SMILES within the size bounds is that long (fix or remove the row)")


def content_hash(path: str) -> str:
    r"""SHA-1 of a file's contents (part of a user file's cache key, so that an edited file is read again)."""
    return file_digest(path, "sha1")
