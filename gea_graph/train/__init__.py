r"""Training: recipes, the LightningModule, metrics, and one run (:func:`fit`) with checkpoints, resume and DDP.

>>> from gea_graph.train import load_recipe, fit
>>> result = fit(load_recipe("geaet-zinc-quick", ["trainer.max_epochs=2"]), "runs/quick")   # doctest: +SKIP

The names below are imported when first used, so that reading a recipe (``gea-graph info``) does not import
Lightning.
"""
from __future__ import annotations

from gea_graph.lazy import lazy_exports

#: Public name -> the module of this package that defines it.
_WHERE = {
    "HIGHER_IS_BETTER": "recipe", "LinkRanking": "metrics", "LinkTargets": "metrics",
    "GraphTask": "module", "cosine_with_warmup": "module", "polynomial_with_warmup": "module",
    "DataConfig": "recipe", "OptimConfig": "recipe", "PaperConfig": "recipe", "Recipe": "recipe",
    "RecipeError": "recipe", "TrainerConfig": "recipe", "available_recipes": "recipe", "load_recipe": "recipe",
    "recipe_from_dict": "recipe", "resolve_recipe": "recipe",
    "AtomicCheckpointIO": "checkpoint", "CheckpointError": "checkpoint", "CheckpointWriteError": "checkpoint",
    "load_checkpoint": "checkpoint", "RunPaused": "run", "fit": "run",
    "RunLockError": "lock", "read_metrics": "logs", "check_run_dir": "run_dir", "read_result": "run_dir",
}

__all__ = [
    "HIGHER_IS_BETTER",
    "AtomicCheckpointIO",
    "CheckpointError",
    "CheckpointWriteError",
    "DataConfig",
    "GraphTask",
    "LinkRanking",
    "LinkTargets",
    "OptimConfig",
    "PaperConfig",
    "Recipe",
    "RecipeError",
    "RunLockError",
    "RunPaused",
    "TrainerConfig",
    "available_recipes",
    "check_run_dir",
    "cosine_with_warmup",
    "fit",
    "load_checkpoint",
    "load_recipe",
    "polynomial_with_warmup",
    "read_metrics",
    "read_result",
    "recipe_from_dict",
    "resolve_recipe",
]


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())
