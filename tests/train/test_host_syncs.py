"""Host syncs of a real training run (``gea_graph.nn.sync_census``): the model makes none (the loop reads the batch's
sizes on the host before moving it), and the loss and metrics keep to a fixed, listed budget."""
from collections import Counter

import pytest
from lightning.pytorch.callbacks import Callback

from gea_graph.nn.sync_census import SyncCensus
from gea_graph.train import GraphTask, fit, load_recipe, recipe_from_dict

from .test_training import FAKE


class Census(Callback):
    """Counts the host syncs of every training step (forward, loss, logging, the train-loss metric), of every
    backward and of every validation step (forward, metric update)."""

    def __init__(self) -> None:
        self.censuses = {"train": SyncCensus(), "backward": SyncCensus(), "validation": SyncCensus()}
        self.steps = Counter()

    def on_fit_start(self, trainer, pl_module) -> None:
        for hook, key in (("training_step", "train"), ("validation_step", "validation")):
            step = getattr(pl_module, hook)

            def counted(*args, _step=step, _key=key, **kwargs):
                self.steps[_key] += 1
                with self.censuses[_key]:
                    return _step(*args, **kwargs)

            setattr(pl_module, hook, counted)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.censuses["backward"].__enter__()

    def on_after_backward(self, trainer, pl_module) -> None:
        self.censuses["backward"].__exit__(None, None, None)

    def sites(self, key: str) -> dict[tuple[str, str], float]:
        """``{(op, function): syncs per step}``."""
        per_site = Counter()
        for event in self.censuses[key].events:
            per_site[(event.op, event.where.split(" in ")[-1].split(" via ")[0])] += 1
        steps = self.steps["train" if key == "backward" else key]
        return {site: n / steps for site, n in per_site.items()}

    def in_model(self) -> list[str]:
        return [f"{e.op} at {e.where}" for c in self.censuses.values() for e in c.events
                if e.where.startswith(("nn/", "models/"))]


def fake_run(path, **model):
    raw = {**FAKE, "model": {**FAKE["model"], **model}, "trainer": {**FAKE["trainer"], "max_epochs": 1}}
    census = Census()
    fit(recipe_from_dict(raw, name="fake"), path, progress=False, verbose=False, accelerator="cpu", devices=1,
        callbacks=[census])
    return census


@pytest.mark.parametrize("attn", ["softmax", "gfsa"])
def test_classification_run_has_no_host_sync_at_all(tmp_path, attn):
    census = fake_run(tmp_path, attn=attn)  # gfsa: the grouped layout, planned from the host-side node counts
    assert census.steps["train"] > 0 and census.steps["validation"] > 0
    for key in ("train", "backward", "validation"):
        assert census.censuses[key].count == 0, census.censuses[key].report()


def test_without_the_host_sizes_the_model_would_sync(tmp_path, monkeypatch):
    # the control: a loop that did not read the sizes before moving the batch leaves them to the model
    monkeypatch.setattr(GraphTask, "on_before_batch_transfer", lambda self, batch, idx: batch)
    census = fake_run(tmp_path, attn="gfsa")
    assert census.in_model() and all("plan.py" in site for site in census.in_model())


#: The syncs of a regression step outside the model, per step: none (missing labels are masked in the loss and the
#: metric, weighted 0, not indexed out).
REGRESSION_BUDGET = {"train": {}, "backward": {}, "validation": {}}


def test_regression_run_on_real_data_makes_no_host_sync(tmp_path, mirror, data_root):
    recipe = load_recipe("geaet-zinc-quick", ["data.subset=64", "trainer.max_epochs=1", "model.hidden=16",
                                              "model.layers=1", "model.pe.dim=4", "trainer.batch_size=16"])
    census = Census()
    fit(recipe, tmp_path, progress=False, verbose=False, accelerator="cpu", devices=1, callbacks=[census])
    assert census.steps["train"] == 4
    assert census.in_model() == []
    for key, budget in REGRESSION_BUDGET.items():
        assert census.sites(key) == budget, census.censuses[key].report()


class AfterSteps(Callback):
    """Counts the host syncs from the end of each training batch to the start of the next (the loop's logging after a
    step: Lightning's tensor-to-float conversions)."""

    def __init__(self) -> None:
        self.census = SyncCensus()
        self.steps = 0
        self.active = False

    def _stop(self) -> None:
        if self.active:
            self.census.__exit__(None, None, None)
            self.active = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._stop()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.census.__enter__()
        self.active = True
        self.steps += 1

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._stop()


def test_logging_the_training_loss_makes_no_sync_per_step(tmp_path):
    # Lightning turns progress-bar values into floats at every step; the training loss is logged, not shown there
    raw = {**FAKE, "trainer": {**FAKE["trainer"], "max_epochs": 1, "batch_size": 4, "log_every_n_steps": 50}}
    counter = AfterSteps()
    fit(recipe_from_dict(raw, name="fake"), tmp_path, progress=False, verbose=False, accelerator="cpu", devices=1,
        callbacks=[counter])
    conversions = [e for e in counter.census.events if "apply_func" in e.where]  # Lightning's tensor -> float
    assert counter.steps >= 16 and len(conversions) < counter.steps // 2, counter.census.report()
