"""A fixed-size run compiled with fullgraph=True: 2 epochs of a small dataset compile at most one graph per fixed
shape, with no graph break, and train exactly as the same run in eager mode (the CI's compile test; a tiny model so
that it stays fast on two cores). The run's graphs are not bounded by torch's recompile limit."""
import json

import pytest
import torch
from torch._dynamo.utils import counters

from gea_graph.train import fit, read_metrics, recipe_from_dict
from gea_graph.train.fixed_size import MAX_COMPILED_GRAPHS

from .test_training import FAKE


def _recipe(compile_with):
    raw = json.loads(json.dumps(FAKE))
    raw["data"]["options"].update(num_graphs=40, avg_num_nodes=6)
    # GEA's batch-wide softmax (the papers' copies) sums over the real rows of a padded batch
    raw["model"].update(hidden=8, layers=1, dropout=0.0, mpnn="gatedgcn", gea=True, norm_scope="batch")
    raw["trainer"].update(max_epochs=2, batch_size=8, eval_batch_size=8, fixed_size=True, compile=compile_with)
    return recipe_from_dict(raw, name="fake")


def test_two_fixed_size_epochs_compile_one_graph_per_shape_without_breaks(tmp_path, monkeypatch):
    from gea_graph.train import module

    tasks = []
    monkeypatch.setattr(module.GraphTask, "on_fit_end", lambda self: tasks.append(self), raising=False)
    torch._dynamo.reset()
    counters.clear()
    # Whole ZINC and Peptides-func runs plan 9 shapes (3 a split), and the 9th graph stopped them at torch's
    # limit of 8 (FailOnRecompileLimitHit): here the limit is lowered below this small run's count of graphs.
    with torch._dynamo.config.patch(recompile_limit=2):
        fit(_recipe("aot_eager"), tmp_path / "compiled", progress=False, verbose=False, accelerator="cpu", devices=1)
    graphs = counters["stats"]["unique_graphs"]
    breaks = sum(counters["graph_break"].values())
    shapes = len(tasks[0].fixed_shapes())
    assert breaks == 0
    assert 2 < graphs <= shapes <= MAX_COMPILED_GRAPHS, (graphs, tasks[0].fixed_shapes())
    fit(_recipe(False), tmp_path / "eager", progress=False, verbose=False, accelerator="cpu", devices=1)
    compiled, eager = read_metrics(tmp_path / "compiled" / "metrics.csv"), read_metrics(tmp_path / "eager" /
                                                                                        "metrics.csv")
    assert len(compiled) == len(eager) == 2
    for a, b in zip(eager, compiled):
        for key in ("train_loss", "val", "test"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (key, a, b)
