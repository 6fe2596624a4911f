"""A trial's validation metric reaches Optuna at each epoch end through the Lightning callback, and a pruner's
decision ends the trial there: its run folder holds the epochs trained and no result (not a complete run)."""

from __future__ import annotations

import optuna

from gea_graph.sweep.study import Settings, plan_targets
from gea_graph.sweep.worker import Objective


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
