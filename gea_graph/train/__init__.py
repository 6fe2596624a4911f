r"""Training: recipes, the LightningModule, metrics, and one run (:func:`fit`) with checkpoints, resume and DDP.

>>> from gea_graph.train import load_recipe, fit
>>> result = fit(load_recipe("geaet-zinc-quick", ["trainer.max_epochs=2"]), "runs/quick")   # doctest: +SKIP
"""
from gea_graph.train.metrics import HIGHER_IS_BETTER, LinkRanking, LinkTargets
from gea_graph.train.module import GraphTask, cosine_with_warmup, polynomial_with_warmup
from gea_graph.train.recipe import (
                                    DataConfig,
                                    OptimConfig,
                                    PaperConfig,
                                    Recipe,
                                    RecipeError,
                                    TrainerConfig,
                                    available_recipes,
                                    load_recipe,
                                    recipe_from_dict,
                                    resolve_recipe,
)
from gea_graph.train.run import (
                                    AtomicCheckpointIO,
                                    CheckpointError,
                                    CheckpointWriteError,
                                    RunLockError,
                                    RunPaused,
                                    check_run_dir,
                                    fit,
                                    load_checkpoint,
                                    read_metrics,
                                    read_result,
)

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
