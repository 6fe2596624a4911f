r"""Hyperparameter search on Optuna: search spaces from recipes, trials as run folders, studies shared across
machines through a storage URL (``gea-graph sweep``).

>>> from gea_graph.sweep import SweepOptions, run_sweep
>>> run_sweep(["gatedgcn-zinc-cpu"], "runs/sweep", SweepOptions(trials=20, max_time=10))   # doctest: +SKIP
"""
from gea_graph.sweep.run import SweepOptions, report_sweep, run_sweep
from gea_graph.sweep.space import SpaceError, parse_space
from gea_graph.sweep.storage import StorageError, mask
from gea_graph.sweep.study import StudyMismatchError

__all__ = ["SpaceError", "StorageError", "StudyMismatchError", "SweepOptions", "mask", "parse_space",
           "report_sweep", "run_sweep"]
