"""Test helpers shared by the training tests."""
from lightning.pytorch.callbacks import Callback


class StopAfter(Callback):
    """Simulates a kill after ``epochs`` finished epochs (their checkpoints written)."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_validation_end(self, trainer, pl_module) -> None:
        if len(pl_module.history) >= self.epochs:
            trainer.should_stop = True
