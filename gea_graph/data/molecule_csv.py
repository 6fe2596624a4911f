r"""Any CSV of SMILES and targets as a dataset (:class:`MoleculeCSV`)."""

from __future__ import annotations

import hashlib
import os.path as osp
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from gea_graph.data.config import PathLike
from gea_graph.data.csv_files import check_record_lengths, content_hash, first_non_utf8
from gea_graph.data.molecules import MoleculeSource, _MoleculeDataset


class MoleculeCSV(_MoleculeDataset):
    r"""Any CSV of SMILES and targets, featurised like the benchmarks (OGB features, same PEs), with no code edits.

    Target ``y`` float from :obj:`target_columns`, :math:`(1)` for one column, else :math:`(1, T)`. Empty cells
    (and ``NaN``) are missing targets, kept as NaN and masked per target by the training losses and metrics;
    infinite or non-numeric cells are refused, naming the file, column and rows. Without
    :obj:`split_column`, a seeded split: ``"random"`` shuffles rows, ``"scaffold"`` groups rows by Bemis-Murcko
    scaffold and fills train with the largest scaffold groups first (so test molecules have unseen scaffolds).
    With :obj:`split_column`, its values name each row's split (``train``, ``val``/``valid``, ``test``). A SMILES
    that occurs in more than one split is reported with a warning (the same molecule in train and test).

    The processed cache lives in ``root/csv-<file stem>-<hash of the path, the file's contents and the options>/``:
    editing the file gives a new cache, never the old targets.

    Args:
        root (str, optional): Data root.
        path (str): The CSV file (``.csv`` or ``.csv.gz``).
        smiles_column (str): Column holding SMILES.
        target_columns (str or list of str): Target column(s).
        split_column (str, optional): Column naming each row's split. (default: :obj:`None`)
        split (str): Which split to load. (default: :obj:`"train"`)
        split_method (str, optional): ``"random"`` or ``"scaffold"`` when there is no split column.
            (default: :obj:`"random"`)
        split_fractions (tuple, optional): Train / val / test fractions. (default: :obj:`(0.8, 0.1, 0.1)`)
        seed (int, optional): Seed of the split. (default: :obj:`0`)
        transform, pre_transform, pre_filter, pe, force_reload, skip_invalid, max_nodes, max_edges: see
            :class:`~gea_graph.data.base.CachedDataset` and :class:`~gea_graph.data.molecules._MoleculeDataset`.
    """

    def __init__(self, root: PathLike | None, path: PathLike, smiles_column: str,
                 target_columns: str | Sequence[str], split_column: str | None = None, split: str = "train",
                 split_method: str = "random", split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
                 seed: int = 0, transform: Callable | None = None, pre_transform: Callable | None = None,
                 pre_filter: Callable | None = None, pe: str | None = None, force_reload: bool = False,
                 skip_invalid: bool = False, max_nodes: int | None = None, max_edges: int | None = None) -> None:
        if split_method not in ("random", "scaffold"):
            raise ValueError(f"split_method must be 'random' or 'scaffold', got {split_method!r}")
        if not osp.isfile(path):
            raise FileNotFoundError(f"MoleculeCSV: no file at {path}")
        fractions = tuple(float(f) for f in split_fractions)
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
            raise ValueError(f"split_fractions {tuple(split_fractions)!r} is not allowed: give three fractions "
                             f"(train, val, test), each >= 0, summing to 1, e.g. (0.8, 0.1, 0.1)")
        self.path = osp.abspath(path)
        self.smiles_column = smiles_column
        self.target_columns = [target_columns] if isinstance(target_columns, str) else list(target_columns)
        self.split_column = split_column
        self.split_method = split_method
        self.split_fractions = tuple(split_fractions)
        self.seed = seed
        stem = osp.basename(self.path).split(".")[0]
        key = repr((self.path, content_hash(self.path), smiles_column, self.target_columns, split_column,
                    split_method, self.split_fractions, seed))
        self.folder = f"csv-{stem}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"
        super().__init__(root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid,
                         max_nodes, max_edges)

    @property
    def raw_dir(self) -> str:
        return osp.dirname(self.path)

    @property
    def raw_file_names(self) -> list[str]:
        return [osp.basename(self.path)]

    def download(self) -> None:  # the user's file is checked to exist in __init__
        pass

    def source(self) -> MoleculeSource:
        check_record_lengths(self.path)  # also checks a .gz file is whole
        try:
            header = pd.read_csv(self.path, header=None, nrows=1, dtype=str).iloc[0].tolist()
            table = pd.read_csv(self.path)
        except pd.errors.EmptyDataError:
            raise ValueError(f"{self.path} is empty: expected a header line naming the columns, then one row per "
                             f"molecule") from None
        except pd.errors.ParserError as err:
            raise ValueError(f"{self.path} is not a readable CSV file: {str(err).strip()}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{self.path} is not UTF-8 text ({first_non_utf8(self.path)}); save it as UTF-8") \
                from None
        twice = sorted({str(name) for name in header if header.count(name) > 1})
        if twice:  # pandas would rename the second one (y.1) and read the first without a word
            raise ValueError(f"{self.path} names the column(s) {twice} more than once in its header "
                             f"{[str(h) for h in header]}; column names must be unique")
        missing = [c for c in [self.smiles_column, *self.target_columns, self.split_column]
                   if c is not None and c not in table.columns]
        if missing:
            raise ValueError(f"{self.path} has no column(s) {missing}; its columns are {list(table.columns)}")
        if len(table) == 0:
            raise ValueError(f"{self.path} has a header but no rows: expected one row per molecule")
        smiles = table[self.smiles_column].tolist()
        targets = self._targets(table)
        if self.split_column is not None:
            names = table[self.split_column].astype(str).str.strip().str.lower().replace({"valid": "val"})
            unknown = sorted(set(names) - set(self.splits))
            if unknown:
                raise ValueError(f"{self.path}: column {self.split_column!r} has values {unknown}; expected "
                                 f"train, val (or valid), test")
            index = {split: np.flatnonzero(names.to_numpy() == split) for split in self.splits}
        elif self.split_method == "random":
            index = self._random_split(len(table))
        else:
            # The scaffold groups are those of the rows RDKit parses, known once the rows are featurised.
            def scaffold_rows(valid: np.ndarray) -> dict[str, np.ndarray]:
                index = self._scaffold_split([smi if ok else None for smi, ok in zip(smiles, valid.tolist())])
                self._warn_duplicates(smiles, index)
                return index

            return MoleculeSource(smiles, targets, self.path, scaffold_rows, files=(self.path,))
        self._warn_duplicates(smiles, index)
        return MoleculeSource(smiles, targets, self.path, index, files=(self.path,))

    def _targets(self, table: pd.DataFrame) -> np.ndarray:
        """The target columns as float32 ``[rows, T]``: empty cells are NaN (missing), text and infinities are
        refused naming the column and rows (0-based, header excluded)."""
        columns = []
        for name in self.target_columns:
            raw = table[name]
            values = pd.to_numeric(raw, errors="coerce")
            bad = np.flatnonzero(values.isna().to_numpy() & raw.notna().to_numpy()
                                 & (raw.astype(str).str.strip().str.lower() != "nan").to_numpy())
            if len(bad):
                raise ValueError(f"{self.path}: target column {name!r} has non-numeric values in rows "
                                 f"{bad[:5].tolist()} (0-based, header excluded), e.g. {raw.iloc[bad[0]]!r}; "
                                 f"allowed: numbers, or an empty cell for a missing target")
            infinite = np.flatnonzero(np.isinf(values.to_numpy(dtype=np.float64)))
            if len(infinite):
                raise ValueError(f"{self.path}: target column {name!r} is infinite in rows {infinite[:5].tolist()} "
                                 f"(0-based, header excluded); allowed: finite numbers, or an empty cell for a "
                                 f"missing target")
            columns.append(values.to_numpy(dtype=np.float32))
        return np.stack(columns, axis=1)

    def _warn_duplicates(self, smiles: Sequence[object], index: dict[str, np.ndarray]) -> None:
        where: dict[str, dict[str, list[int]]] = {}
        for split, rows in index.items():
            for row in rows.tolist():
                where.setdefault(str(smiles[row]).strip(), {}).setdefault(split, []).append(row)
        shared = {smi: found for smi, found in where.items() if len(found) > 1}
        if shared:
            smi, found = next(iter(shared.items()))
            example = ", ".join(f"{split} row(s) {rows[:3]}" for split, rows in found.items())
            warnings.warn(f"{self.path}: {len(shared)} SMILES occur in more than one split, e.g. {smi!r} in "
                          f"{example} (0-based, header excluded): the same molecule is trained on and evaluated. "
                          f"Remove duplicate rows, or use split_method='scaffold' (which keeps them together).",
                          stacklevel=3)

    def _sizes(self, n: int) -> tuple[int, int]:
        n_train = round(self.split_fractions[0] * n)
        n_val = round(self.split_fractions[1] * n)
        return n_train, n_val

    def _random_split(self, n: int) -> dict[str, np.ndarray]:
        perm = np.random.default_rng(self.seed).permutation(n)
        n_train, n_val = self._sizes(n)
        return {"train": perm[:n_train], "val": perm[n_train:n_train + n_val], "test": perm[n_train + n_val:]}

    def _scaffold_split(self, smiles: Sequence[str | None]) -> dict[str, np.ndarray]:
        from rdkit.Chem.Scaffolds import MurckoScaffold

        groups: dict[str, list[int]] = {}
        for row, smi in enumerate(smiles):
            if smi is not None:
                groups.setdefault(MurckoScaffold.MurckoScaffoldSmiles(smiles=smi), []).append(row)
        # Largest groups first, ties broken by a seeded shuffle, then greedy filling of train, val, test.
        order = list(groups.values())
        np.random.default_rng(self.seed).shuffle(order)
        order.sort(key=len, reverse=True)
        n_train, n_val = self._sizes(len(smiles))
        out: dict[str, list[int]] = {"train": [], "val": [], "test": []}
        for rows in order:
            if len(out["train"]) + len(rows) <= n_train:
                out["train"] += rows
            elif len(out["val"]) + len(rows) <= n_val:
                out["val"] += rows
            else:
                out["test"] += rows
        return {k: np.array(sorted(v), dtype=np.int64) for k, v in out.items()}
