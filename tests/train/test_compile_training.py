"""``torch.compile`` in training: ``trainer.compile`` trains the same function as eager mode, and a model compiled with
dynamic shapes compiles once for a stream of batch sizes, whatever its largest graph: once for batches of several
graphs and once for a batch of one graph (torch specialises a size of 1)."""
import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from gea_graph.models.networks import host_sizes
from gea_graph.train import GraphTask, RecipeError, fit, load_recipe, read_metrics, recipe_from_dict

from .test_training import FAKE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nn"))
from test_compile import _grads, needs_cxx
from test_model_recipes import synthetic_batch

#: Batch compositions of the stream: graphs of mixed sizes (six largest graphs), one-graph batches, a single-node graph
#: among others.
STREAM = ((5, 9, 7), (3, 12, 4, 8, 6), (11, ), (2, 30, 5, 1, 9, 14, 3), (3, ), (7, 4, 13))


def _compiled_task(name: str, backend: str) -> tuple[GraphTask, Any]:
    """A small model of the recipe and the compiled model that ``trainer.compile: BACKEND`` trains."""
    torch._dynamo.reset()
    recipe = load_recipe(name, ["model.hidden=16", "model.layers=1", f"trainer.compile={backend}"])
    torch.manual_seed(0)
    task = GraphTask(recipe.to_dict())
    task.model.train()
    return task, task._compiled


def _graphs() -> int:
    """Graphs compiled so far in this process."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("name", ["graphormer-gfsa-zinc-cpu"])  # GEAET: the inductor test below counts its graphs
def test_a_stream_of_batch_sizes_compiles_once_per_batch_kind(name):
    task, compiled = _compiled_task(name, "aot_eager")
    model, recipe, before = task.model, task.recipe, _graphs()
    for i, sizes in enumerate(STREAM):
        batch = synthetic_batch(recipe, sizes)
        n_max = host_sizes(batch)["max_num_nodes"]
        out = compiled(batch, max_num_nodes=n_max)
        torch.testing.assert_close(out, model(batch, max_num_nodes=n_max), atol=1e-5, rtol=1e-5)
        out.sum().backward()
        kinds = len({len(s) == 1 for s in STREAM[:i + 1]})  # several graphs, one graph
        assert _graphs() - before == kinds, f"{name}: compiled again for the batch of sizes {sizes}"


@needs_cxx
@pytest.mark.parametrize("name", ["geaet-zinc-quick", "gcn-zinc-cpu", "gin-zinc-cpu", "graphormer-zinc-cpu"])
def test_inductor_compiled_model_matches_eager_on_a_stream_of_batch_sizes(name):
    # trainer.compile: true is inductor (torch 2.13, dynamic shapes), which fixed the stride of a saved tensor [c, n]
    # (c fixed, n the batch's) to its first batch's: GCN, GIN, GEAET and GPS recipes failed at their second batch (the
    # input edge_index [2, E], GCN's self loops concatenated along dim 1, the packed attention's log-sum-exp [H, N]).
    # Outputs and gradients against eager. With torch's backed_size_oblivious on, inductor specialised the largest
    # graph's size instead: a run compiled again for each new size and failed at dynamo's recompile limit.
    task, compiled = _compiled_task(name, "true")  # inductor
    twin, recipe, before = task.model, task.recipe, _graphs()
    model = copy.deepcopy(twin)
    for sizes in STREAM:
        batch = synthetic_batch(recipe, sizes)
        n_max = host_sizes(batch)["max_num_nodes"]
        torch.manual_seed(1)  # the PE's sign flips
        out = compiled(batch, max_num_nodes=n_max)
        torch.manual_seed(1)
        ref = model(batch, max_num_nodes=n_max)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        out.square().sum().backward()
        ref.square().sum().backward()
        # a gradient left out counts as zero: GEA's key bias cancels, and the compiled path does not form its gradient
        for mine, theirs in zip(_grads(twin), _grads(model)):
            torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=1e-4)
        twin.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
    assert _graphs() - before == 2  # several graphs, one graph: not one per largest graph


def test_trainer_compile_trains_the_eager_function(tmp_path):
    raw = {**FAKE, "model": {**FAKE["model"], "dropout": 0.0},
           "trainer": {**FAKE["trainer"], "max_epochs": 1}}
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    fit(recipe_from_dict({**raw, "trainer": {**raw["trainer"], "compile": "aot_eager"}}, name="fake"),
        tmp_path / "compiled", progress=False, verbose=False, accelerator="cpu", devices=1)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # the model ran compiled
    fit(recipe_from_dict(raw, name="fake"), tmp_path / "eager", progress=False, verbose=False, accelerator="cpu",
        devices=1)
    compiled, eager = (read_metrics(tmp_path / run / "metrics.csv") for run in ("compiled", "eager"))
    for a, b in zip(compiled, eager, strict=True):
        for key in ("train_loss", "val", "test"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), key


def test_trainer_compile_values_are_checked():
    assert load_recipe("geaet-zinc-quick", ["trainer.compile=true"]).trainer.compile is True
    with pytest.raises(RecipeError, match="trainer.compile: 'fastest' is not a torch.compile backend"):
        load_recipe("geaet-zinc-quick", ["trainer.compile=fastest"])
