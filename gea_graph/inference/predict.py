r"""``gea-graph predict``: predictions of one model or an ensemble for SMILES, a CSV file or a dataset's split,
streamed in chunks to a CSV file (and the embeddings to a ``.npy`` file).

Output (``preds.csv``), one row per input, row ``i`` for input ``i``::

    <id column, or "row">, smiles, <target>..., [<target>_std...], [<target>_model<k>...], error

* targets are named as in training (the training CSV's target columns, or the dataset card's names); for several
  checkpoints they hold the ensemble's mean, ``<target>_std`` the standard deviation over the models (``ddof=0``)
  and, with ``individual``, ``<target>_model<k>`` model ``k``'s value (``k``: the checkpoint's position, from 0);
* an input that cannot be featurised (no SMILES, whitespace inside it, beyond the size bounds
  :class:`~gea_graph.data.SizeBounds`, not parsed by RDKit, outside the vocabulary), or whose prediction is not a
  finite number, keeps its row with empty predictions and its reason in ``error``.

Memory stays bounded: the input is read, featurised, predicted and written :func:`~gea_graph.data.featurizer.chunk_rows`
rows at a time (a CSV through :func:`gea_graph.data.csv_files.read_chunks`, which never holds a record longer than
:data:`~gea_graph.data.csv_files.MAX_RECORD_BYTES`), so a million SMILES never hold a million graphs at once. The
files are written to exclusively created temporaries and renamed into place when complete
(:func:`gea_graph.io.exclusive_temporary`): a killed run leaves no half-written output.
"""
from __future__ import annotations

import csv
import gzip
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from gea_graph.data.csv_files import read_chunks, read_header
from gea_graph.data.featurizer import chunk_rows
from gea_graph.data.featurizers import SizeBounds
from gea_graph.inference.inputs import InputChunk, graph_chunks, smiles_chunks
from gea_graph.inference.model import TrainedModel, common_featurizer, read_smiles
from gea_graph.io import atomic_write, ensure_folder, move_into

#: OGB's required sizes of a PCQM4Mv2 submission (``PCQM4Mv2Evaluator.save_test_submission`` asserts them).
PCQM4MV2_SUBMISSION_SIZES = {"test-dev": 147_037, "test-challenge": 147_432}


@dataclass
class Source:
    r"""Where the inputs come from: the chunks, the number of inputs when known (for the progress bar) and the name
    of the id column."""

    chunks: Iterator[InputChunk]
    total: int | None
    id_name: str = "row"


def smiles_source(smiles: Sequence[str], models: Sequence[TrainedModel], bounds: SizeBounds | None = None) -> Source:
    r"""SMILES given on the command line or in Python, each within :obj:`bounds`."""
    featurizer = common_featurizer(models)
    featurizer.check_smiles()
    return Source(smiles_chunks(list(smiles), featurizer, bounds=bounds), len(smiles))


def _count_rows(path: str) -> int | None:
    r"""Data rows of a CSV (lines after the header), counted without parsing: only the progress bar's total."""
    opener = gzip.open if path.endswith(".gz") else open
    lines = 0
    try:
        with opener(path, "rb") as f:
            while block := f.read(1 << 22):
                lines += block.count(b"\n")
    except OSError:
        return None
    return max(lines - 1, 0)


def csv_source(path: str, smiles_column: str, id_column: str | None, models: Sequence[TrainedModel],
               size: int | None = None, bounds: SizeBounds | None = None) -> Source:
    r"""A CSV file read :obj:`size` rows at a time (columns :obj:`smiles_column` and :obj:`id_column` only, as text:
    ids are written back exactly as read, an empty cell is an invalid row), each SMILES within :obj:`bounds`. A
    record too long to read whole is an invalid row with its reason; a header-only file gives no rows."""
    featurizer = common_featurizer(models)
    featurizer.check_smiles()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--csv: no file at {path}")
    header = read_header(path)
    for option, column in (("--smiles-column", smiles_column), ("--id-column", id_column)):
        if column is not None and column not in header:
            raise ValueError(f"{option} {column!r}: {path} has no such column; its columns are {header}")
    columns = [smiles_column] + ([id_column] if id_column not in (None, smiles_column) else [])
    size = size or chunk_rows()

    def chunks() -> Iterator[InputChunk]:
        start = 0
        for table in read_chunks(path, columns, size):
            smiles = table.columns[smiles_column]
            ids = table.columns[id_column] if id_column is not None else None
            # A record not read whole is no SMILES, whatever its first bytes hold.
            graphs = featurizer.featurize([None if i in table.errors else s for i, s in enumerate(smiles)], bounds)
            graphs.errors.update(table.errors)
            yield InputChunk(start, len(smiles), graphs, smiles, ids)
            start += len(smiles)

    return Source(chunks(), _count_rows(path), id_column or "row")


def dataset_source(name: str, split: str, models: Sequence[TrainedModel], root: str | None = None) -> Source:
    r"""Split :obj:`split` of the built-in dataset :obj:`name`, made with the models' featurisation in the data root
    (:obj:`root`, else ``$GEA_GRAPH_DATA``, else ``./datasets``; never a path from a checkpoint)."""
    dataset = common_featurizer(models).load_dataset(split, root, name=name)
    return Source(graph_chunks(dataset), len(dataset))


@dataclass
class Summary:
    r"""What a prediction run did."""

    predicted: int = 0
    invalid: int = 0
    first_error: tuple[int, Any, str] | None = None
    values: list[np.ndarray] = field(default_factory=list)  # the ensemble's means, kept for a submission only

    def line(self) -> str:
        return f"{self.predicted} predicted, {self.invalid} invalid"


def _format(value: float) -> str:
    return f"{value:.8g}"


def _short(text: Any, limit: int = 80) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(str(text)):,} characters)"


def _non_finite(values: np.ndarray, names: Sequence[str]) -> str | None:
    r"""Why the outputs ``[M, T]`` of one input (model ``k``, target ``t``) give no prediction, or :obj:`None`."""
    bad = np.argwhere(~np.isfinite(values))
    if not len(bad):
        return None
    k, t = bad[0]
    who = f"model {k}" if values.shape[0] > 1 else "the model"
    more = f" ({len(bad) - 1} more non-finite outputs)" if len(bad) > 1 else ""
    return (f"{who} gave {values[k, t]} for {names[t]!r}{more}: not a number to report (a corrupted checkpoint or "
            f"an input far outside the training data)")


def predict_to_files(models: Sequence[TrainedModel], source: Source, out: str | os.PathLike,
                     batch_size: int | None = None, embeddings: str | os.PathLike | None = None,
                     individual: bool = False, strict: bool = False, keep_values: bool = False,
                     progress: bool = True) -> Summary:
    r"""Predicts every input of :obj:`source` with :obj:`models` and writes ``preds.csv`` to :obj:`out` (the module
    docstring gives its columns) and, with :obj:`embeddings`, each input's graph representation to a ``.npy`` file
    (``[N, d]`` for one model, ``[N, M, d]`` for M models; NaN rows for invalid inputs), both in input order.

    With :obj:`strict`, the first invalid input is an error (nothing is written). :obj:`keep_values` keeps the
    ensemble's mean predictions in the returned :class:`Summary` (a PCQM4Mv2 submission needs them).

    Raises:
        ValueError: with :obj:`strict`, naming the first invalid input and why.
    """
    models = list(models)
    common_featurizer(models)
    names = models[0].target_names
    several = len(models) > 1
    header = ([source.id_name, "smiles", *names] + ([f"{n}_std" for n in names] if several else [])
              + ([f"{n}_model{k}" for k in range(len(models)) for n in names] if individual else []) + ["error"])
    summary = Summary()
    for path in (out, embeddings):
        if path is not None:
            ensure_folder(Path(path).parent)
    with ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=source.total, unit="mol", desc="predict (read, featurise, predict)",
                                       leave=False,
                                       disable=not progress))
        writer = csv.writer(stack.enter_context(atomic_write(out, "w", newline="")))
        writer.writerow(header)
        raw = None
        if embeddings is not None:
            # The values as they stream, in a file without a name (gone when closed, whatever happens) beside the
            # output; the .npy header needs the final row count, so the file is written at the end.
            raw = stack.enter_context(tempfile.TemporaryFile(dir=Path(embeddings).parent))
        width = None
        for chunk in source.chunks:
            texts: dict[int, Any] = {}
            outs, embs = [], []
            for k, model in enumerate(models):
                read = k == 0 and chunk.smiles is None
                values, emb = model.run(chunk.graphs, batch_size, embeddings=raw is not None,
                                        on_batch=partial(read_smiles, texts) if read else None)
                outs.append(values.numpy())
                if emb is not None:
                    embs.append(emb.numpy())
            if chunk.smiles is not None:
                smiles = chunk.smiles
            else:  # texts by position among the valid graphs
                smiles = [None] * chunk.size
                for g, r in enumerate(chunk.graphs.rows.tolist()):
                    smiles[r] = texts.get(g)
            ids = chunk.ids if chunk.ids is not None else range(chunk.start, chunk.start + chunk.size)
            errors = dict(chunk.graphs.errors)
            stacked = np.stack(outs).astype(np.float64)  # [M, G, T]; float64: no overflow of the mean or std
            position = {int(r): g for g, r in enumerate(chunk.graphs.rows.tolist())}
            for i, g in list(position.items()):
                reason = _non_finite(stacked[:, g], names)
                if reason is not None:  # no number to report: an invalid row, never a silent NaN
                    errors[i] = reason
                    del position[i]
            if strict and errors:
                row = min(errors)
                raise ValueError(f"--strict: input row {chunk.start + row} ({_short(smiles[row])}) is invalid: "
                                 f"{errors[row]}")
            mean = stacked.mean(axis=0)
            std = stacked.std(axis=0)
            for i in range(chunk.size):
                g = position.get(i)
                if g is None:
                    cells = [""] * (len(header) - 3)
                    summary.invalid += 1
                    if summary.first_error is None:
                        shown = smiles[i] if not isinstance(smiles[i], str) or len(smiles[i]) <= 80 else \
                            f"{smiles[i][:60]}... ({len(smiles[i]):,} characters)"
                        summary.first_error = (chunk.start + i, shown, errors.get(i, ""))
                else:
                    cells = [_format(v) for v in mean[g]]
                    if several:
                        cells += [_format(v) for v in std[g]]
                    if individual:
                        cells += [_format(v) for k in range(len(models)) for v in stacked[k, g]]
                    summary.predicted += 1
                smiles_text = smiles[i] if isinstance(smiles[i], str) else ""
                writer.writerow([ids[i], smiles_text, *cells, errors.get(i, "")])
            if keep_values:
                block = np.full((chunk.size, len(names)), np.nan, np.float32)
                valid = sorted(position)
                block[valid] = mean[[position[i] for i in valid]]
                summary.values.append(block)
            if raw is not None:
                width = _write_embeddings(raw, embs, chunk, width)
            bar.update(chunk.size)
        if raw is not None:
            shape = (summary.predicted + summary.invalid,) + ((len(models),) if several else ()) + (width or 0,)
            _finish_npy(raw, embeddings, shape)
    return summary


def _write_embeddings(raw: Any, embs: list[np.ndarray], chunk: InputChunk, width: int | None) -> int:
    dims = {e.shape[1] for e in embs}
    if len(dims) > 1:
        raise ValueError(f"--embeddings: the models' representations have different sizes {sorted(dims)}; write "
                         f"them one model at a time")
    d = dims.pop() if dims else (width or 0)
    block = np.full((chunk.size, len(embs), d), np.nan, dtype=np.float32)
    for k, e in enumerate(embs):
        block[chunk.graphs.rows, k] = e
    raw.write(np.ascontiguousarray(block).tobytes())
    return d


def _finish_npy(raw: Any, path: str | os.PathLike, shape: tuple[int, ...]) -> None:
    r"""The ``.npy`` file of the streamed float32 values in the open file :obj:`raw` (header, then the values
    copied in blocks)."""
    raw.flush()
    raw.seek(0)
    with atomic_write(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                 "fortran_order": False, "shape": shape})
        shutil.copyfileobj(raw, f, 1 << 22)


def bench_checkpoints(folder: str | os.PathLike, recipe: str) -> list[str]:
    r"""The ``best.ckpt`` of every complete seed of :obj:`recipe` in a ``gea-graph bench`` output folder
    (``DIR/RECIPE/seed<k>/``, complete: holding ``result.json``), in seed order."""
    base = Path(folder) / recipe
    if not base.is_dir():
        known = sorted(p.name for p in Path(folder).iterdir() if p.is_dir()) if Path(folder).is_dir() else []
        raise FileNotFoundError(f"--bench: no runs of {recipe!r} in {folder} (it holds {known or 'nothing'})")
    runs = sorted((p for p in base.glob("seed*") if p.name[4:].isdigit()), key=lambda p: int(p.name[4:]))
    found = [str(p / "checkpoints" / "best.ckpt") for p in runs
             if (p / "result.json").is_file() and (p / "checkpoints" / "best.ckpt").is_file()]
    if not found:
        raise FileNotFoundError(f"--bench: {base} holds no complete run (seed*/result.json and "
                                f"seed*/checkpoints/best.ckpt)")
    return found


def write_pcqm4mv2_submission(values: np.ndarray, split: str, folder: str | os.PathLike) -> Path:
    r"""OGB's PCQM4Mv2 submission file for :obj:`split` (``test-dev`` or ``test-challenge``) in :obj:`folder`,
    written by ``PCQM4Mv2Evaluator.save_test_submission`` (into a fresh temporary folder, then moved into place).

    Raises:
        ValueError: when the number of predictions is not the one OGB requires for the split.
    """
    from ogb.lsc import PCQM4Mv2Evaluator

    if split not in PCQM4MV2_SUBMISSION_SIZES:
        raise ValueError(f"--ogb-submission: split {split!r} has no submission; OGB takes "
                         f"{' or '.join(PCQM4MV2_SUBMISSION_SIZES)}")
    y_pred = np.asarray(values, dtype=np.float32).reshape(-1)
    need = PCQM4MV2_SUBMISSION_SIZES[split]
    if y_pred.shape != (need,):
        raise ValueError(f"--ogb-submission: OGB's {split} submission holds {need:,} predictions, but the {split} "
                         f"split here has {y_pred.size:,} graphs (a replica or a subset is not OGB's split)")
    if np.isnan(y_pred).any():
        raise ValueError(f"--ogb-submission: {int(np.isnan(y_pred).sum())} {split} graphs have no prediction")
    folder = Path(ensure_folder(folder))
    # OGB writes into a folder of its choosing: a fresh scratch folder beside the target, removed afterwards (a
    # fixed name would replace a folder of the user's that happens to have it)
    with tempfile.TemporaryDirectory(prefix=".submission-", dir=folder) as staging:
        PCQM4Mv2Evaluator().save_test_submission({"y_pred": y_pred}, staging, split)
        (written,) = list(Path(staging).iterdir())
        target = folder / written.name
        move_into(written, target)
    return target
