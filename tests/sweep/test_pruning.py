"""A trial's validation metric reaches Optuna at each epoch end through the Lightning callback, and a pruner's
decision ends the trial there: its run folder holds the epochs trained and no result (not a complete run)."""

from __future__ import annotations

import optuna

from gea_graph.sweep.study import Settings, open_study, plan_targets
from gea_graph.sweep.worker import Objective, work
from tests.sweep.conftest import write_recipe


class PruneFromSecondEpoch(optuna.pruners.BasePruner):
    def prune(self, study, trial) -> bool:
        return trial.last_step is not None and trial.last_step >= 1


def test_the_pruner_ends_a_trial_at_an_epoch_end(tmp_path, tiny, shared_data_root, monkeypatch):
    monkeypatch.setenv("GEA_GRAPH_DATA", str(shared_data_root))
    (target,) = plan_targets([str(tiny)], "s", [], None)
    settings = Settings(["tiny"], trials=1, max_time=None, max_params=None)
    study = optuna.create_study(direction=target.direction, pruner=PruneFromSecondEpoch(),
                                sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(Objective(target, settings, tmp_path, []), n_trials=1)
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert sorted(trial.intermediate_values) == [0, 1]  # epochs 0 and 1 reported, pruned at the end of 1
    assert trial.user_attrs["reason"] == "pruned by the pruner at an epoch end"
    run = tmp_path / trial.user_attrs["run_dir"]
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / "result.json").exists()


def test_a_worker_searches_the_next_study_while_the_last_trial_of_one_runs_elsewhere(tmp_path, shared_data_root,
                                                                                      monkeypatch):
    """Study a's only trial runs in another worker: this worker trains study b's meanwhile, then comes back to a and
    ends when that trial finishes (a core never idles while a study still has trials to run)."""
    monkeypatch.setenv("GEA_GRAPH_DATA", str(shared_data_root))
    targets = plan_targets([str(write_recipe(tmp_path, "a", epochs=1)), str(write_recipe(tmp_path, "b", epochs=1))],
                           "s", [], None)
    settings = Settings(["a", "b"], trials=1, max_time=None, max_params=None)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    elsewhere = open_study(storage, targets[0], settings, 0)
    running = elsewhere.ask()  # the other worker's trial
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("[b 1/1] trial"):
            elsewhere.tell(running, 0.5)  # the other worker finishes

    assert work(storage, targets, settings, tmp_path, 0, [], log=log, poll=0.05)
    assert lines[0].startswith("[a 0/1] waiting for 1 trial(s) running elsewhere") and lines[1].startswith("[b 1/1]")
    assert len(lines) == 2  # a's trial is counted once, b's too
    assert [t.state for t in optuna.load_study(study_name=targets[1].study_name, storage=storage).trials] == \
        [optuna.trial.TrialState.COMPLETE]
