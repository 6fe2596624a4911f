"""Smoke test of the performance suite: it runs at tiny sizes and writes the reports with the right
keys. Wall-clock results are never asserted (they are noise on shared machines)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from gea_graph.bench.perf import data as perf_data
from gea_graph.bench.perf import pipeline as perf_pipeline
from gea_graph.bench.perf.core import JSON_KEYS, Row, Settings, Target
from gea_graph.bench.perf.suite import run_suite
from gea_graph.cli import build_parser

# Every group except the dataset build (all 12k ZINC molecules by design) and the training
# throughput (trains on that build): both are covered by `gea-graph perf --quick`.
SMOKE_GROUPS = ["external", "gps", "attention", "geaet", "graphormer", "agf", "spd"]


def _few_random_graphs(dataset: str, count: int) -> tuple:
    return perf_data.random_graphs(dataset, min(count, 8)), "random (test)"


def test_suite_writes_reports_with_exact_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    # Tiny inputs: a few random molecule-like graphs instead of the real mini-batches.
    monkeypatch.setattr(perf_data, "real_graphs", _few_random_graphs)
    monkeypatch.setattr(perf_pipeline, "real_graphs", _few_random_graphs)
    rows = run_suite(Settings.tiny(), tmp_path, only=SMOKE_GROUPS, log=lambda _: None)
    assert rows
    assert not [row.note for row in rows if row.note.startswith("failed")]
    assert {"size-grouped attention [Peptides-func, batch 128]", "size-grouped GFSA [Peptides-func, batch 128]",
            "attention padding waste [Peptides-func, batch 128]"} <= {row.name for row in rows}
    data = json.loads((tmp_path / "perf.json").read_text())
    assert len(data) == len(rows)
    for obj in data:
        assert tuple(obj) == JSON_KEYS
        assert isinstance(obj["met"], bool)
        assert isinstance(obj["name"], str) and isinstance(obj["unit"], str)
    table = (tmp_path / "perf.md").read_text()
    for row in rows:
        assert row.name in table


def test_compile_group_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # The compiled-vs-eager rows come out on a tiny setting (aot_eager backend; no timing asserted).
    monkeypatch.setattr(perf_data, "real_graphs", _few_random_graphs)
    rows = run_suite(Settings.tiny(), None, only=["compile"], log=lambda _: None)
    names = [row.name for row in rows]
    assert names == ["GEAET layer compiled vs eager [ZINC]", "GEAET layer compiled vs eager [ZINC] · peak memory",
                     "ZINC GEAET model compiled vs eager", "ZINC GEAET model compiled vs eager · peak memory",
                     "ZINC GEAET training step compiled vs eager"]
    assert all(row.ours is not None and row.reference is not None for row in rows), [r.note for r in rows]


def test_failing_group_becomes_an_unmet_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    def broken(_: Settings) -> list:
        raise RuntimeError("boom")

    monkeypatch.setattr("gea_graph.bench.perf.suite.row_groups", lambda: {"broken": broken})
    rows = run_suite(Settings.tiny(), tmp_path, log=lambda _: None)
    assert [r.name for r in rows] == ["broken"]
    assert rows[0].met is False and "boom" in rows[0].note


def test_a_group_keeps_the_rows_it_gave_before_failing_and_each_is_on_disk_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a GPU chunk stops perf with a timeout: what was measured before must already be in perf.json
    on_disk: list[list[str]] = []

    def two_then_boom(_: Settings):
        yield Row("first", 1.0, 2.0, "ms", Target("<=", 1.0))
        on_disk.append([r["name"] for r in json.loads((tmp_path / "perf.json").read_text())])
        yield Row("second", 3.0, 2.0, "ms", Target("<=", 1.0))
        on_disk.append([r["name"] for r in json.loads((tmp_path / "perf.json").read_text())])
        raise RuntimeError("the third row's run ended")

    monkeypatch.setattr("gea_graph.bench.perf.suite.row_groups", lambda: {"gpu": two_then_boom})
    rows = run_suite(Settings.tiny(), tmp_path, log=lambda _: None)
    assert on_disk == [["first"], ["first", "second"]]
    assert [r.name for r in rows] == ["first", "second", "gpu"]
    assert rows[-1].met is False and "the third row's run ended" in rows[-1].note
    assert [r["name"] for r in json.loads((tmp_path / "perf.json").read_text())] == ["first", "second", "gpu"]


def test_row_ratio_and_targets() -> None:
    assert Row("a", 2.0, 4.0, "ms", Target("<=", 1.0)).met
    assert not Row("b", 5.0, 4.0, "ms", Target("<=", 1.0)).met
    assert Row("c", 100.0, 110.0, "graphs/s", Target(">=", 0.8)).ratio == pytest.approx(100 / 110)
    absolute = Row("d", 12.0, None, "s", Target("<=", 30.0, on="ours"))
    assert absolute.ratio is None and absolute.met
    assert Row("e", 1.0, 2.0, "MiB").met  # informational rows (no target) are always met


def test_cli_registers_perf() -> None:
    args = build_parser().parse_args(["perf", "--quick", "--out", "x", "--only", "agf"])
    assert args.quick and args.out == Path("x") and args.only == ["agf"] and callable(args.func)


@pytest.mark.parametrize("ogb", [False, True])
def test_throughput_reference_is_the_pyg_gps_peer(ogb: bool) -> None:
    # The reference of the training-throughput row is the `pyg-gps-zinc` peer, on ZINC in either encoding.
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader

    from gea_graph.bench.perf.throughput import reference_trainer
    from gea_graph.models import PyGGPS

    gen = torch.Generator().manual_seed(0)
    graphs = []
    for n in (4, 6, 5, 7):
        ei = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
        ei = torch.cat([ei, ei.flip(0)], 1)
        if ogb:
            x = torch.stack([torch.randint(0, d, (n,), generator=gen) for d in get_atom_feature_dims()], 1)
            e = torch.stack([torch.randint(0, d, (ei.size(1),), generator=gen) for d in get_bond_feature_dims()], 1)
        else:
            x = torch.randint(0, 28, (n, 1), generator=gen)
            e = torch.randint(1, 4, (ei.size(1), 1), generator=gen)
        graphs.append(Data(x=x, edge_index=ei, edge_attr=e, rw_pe=torch.rand(n, 20, generator=gen),
                           y=torch.randn(1, generator=gen)))
    trainer = reference_trainer(DataLoader(graphs, batch_size=2), torch.device("cpu"))
    assert isinstance(trainer.model, PyGGPS)
    trainer.run(2)
    assert trainer.graphs == 4
    # both sides of the row are timed alike: single steps, alternating (order flipped after every pair)
    from gea_graph.bench.perf.throughput import alternate

    other = reference_trainer(DataLoader(graphs, batch_size=2), torch.device("cpu"))
    order: list[str] = []
    def recording(run, name):
        def wrapped(steps, timed=True):
            order.append(name)
            return run(steps, timed)
        return wrapped

    for name, t in (("a", trainer), ("b", other)):
        t.run = recording(t.run, name)
    alternate(trainer, other, 3, warmup=1)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert trainer.graphs == 4 + 3 * 2 and other.graphs == 3 * 2


def test_scale_group_rows(mirror: Path) -> None:
    # The scale rows on a 300-molecule replica (builds in subprocesses, both loaders); no timing asserted.
    pytest.importorskip("ogb")
    rows = run_suite(Settings.tiny(), None, only=["scale"], log=lambda _: None)
    build = "PCQM4Mv2 build (spd:20:paths=5), 300 rows"
    loader = "GraphLoader graphs/s (batch 256, 2 workers, spd fields)"
    assert [(row.name, row.unit) for row in rows] == [
        (build, "s"), (f"{build} · peak memory", "MiB"), (f"{build} · bytes on disk", "MiB"),
        (loader, "graphs/s"), (f"{loader} · absolute", "graphs/s")], [row.note for row in rows]
    for row in rows:
        assert math.isfinite(row.ours) and row.ours > 0, row
        assert row.reference is None or (math.isfinite(row.reference) and row.reference > 0), row
    assert rows[-1].reference is None and str(rows[-1].target) == "ours ≥ 10000"
    assert "peak RSS of the largest process" in rows[1].note and "load average" in rows[3].note


def test_predict_rows_compare_the_ogb_pyg_path_on_the_same_model(mirror: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The predict rows on a few real ZINC molecules (the suite's ZINC build replaced by a stand-in holding their
    SMILES); both paths predict the same values for the same model."""
    import tempfile
    import types

    import numpy as np
    import pandas as pd

    from gea_graph.bench.perf import predict as perf_predict

    smiles = pd.read_csv(mirror / "zinc-subset" / "smiles_score.csv")["SMILES"].tolist()[:40]
    stand_in = types.SimpleNamespace(splits={"test": types.SimpleNamespace(smiles=smiles)})
    monkeypatch.setattr(perf_predict, "build_zinc", lambda: stand_in)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two test processes share two cores
    try:
        rows = perf_predict.predict_rows(Settings.tiny())
    finally:
        torch.set_num_threads(threads)
    assert [r.name for r in rows] == ["predict [ZINC GEAET checkpoint, SMILES to prediction]",
                                      "predict throughput [ZINC GEAET checkpoint, SMILES to prediction]"]
    assert rows[0].unit == "s/1000 mol" and str(rows[0].target) == "≤ 0.67"
    assert rows[1].unit == "mol/s" and str(rows[1].target) == "ours ≥ 1000"
    assert all(r.ours > 0 and r.reference > 0 for r in rows)
    with tempfile.TemporaryDirectory() as folder:
        trained = perf_predict.zinc_checkpoint(Path(folder))
    ours = trained.predict(smiles).values
    reference = perf_predict.reference_predict(trained.model, smiles, 16, 7)
    np.testing.assert_allclose(ours, reference, rtol=1e-3, atol=1e-3)


def test_cuda_timings_synchronise_around_the_timed_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # A GPU runs asynchronously: a timed region must wait for the work queued before it and inside it, in every row
    # (the layer and compile rows through `timed`, the throughput and training-step rows through StepTimer).
    from gea_graph.bench.perf.core import timed
    from gea_graph.bench.perf.throughput import StepTimer

    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    timed(lambda: events.append("work"), torch.device("cuda"))
    assert events == ["sync", "work", "sync"]
    events.clear()
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    timer = StepTimer(model, lambda m, b: m(b).sum(), optimizer, [], torch.device("cpu"))
    timer.device = torch.device("cuda")
    monkeypatch.setattr(timer, "_step", lambda: events.append("step") or 1)
    timer.run(2)
    assert events == ["sync", "step", "step", "sync"] and timer.graphs == 2


def _tiny_recipe(tmp_path: Path, name: str, gea: bool, graphs: int = 40) -> str:
    import yaml

    recipe = {"data": {"cls": "torch_geometric.datasets.FakeDataset",
                       "options": {"num_graphs": graphs, "avg_num_nodes": 6, "num_channels": 4, "edge_dim": 2,
                                   "num_classes": 3}},
              "model": {"family": "geaet" if gea else "mpnn", "task": "graph_classification", "out_channels": 3,
                        "hidden": 8, "layers": 1, "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear",
                        "edge_in": 2, "mpnn": "gcn", "attn": None, "gea": gea},
              "optim": {"lr": 0.01, "schedule": "constant"},
              "trainer": {"max_epochs": 5, "batch_size": 2, "seeds": [0]}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_geanet_step_row_times_steps_inside_real_training_runs(tmp_path: Path) -> None:
    # Two tiny recipes (GCN+GEANet, GCN) through the quick path: one fresh training process each, the steps past
    # the warm-up timed by the StepTimes callback.
    from gea_graph.bench.perf.training import QUICK_STEP_RUN, STEP_WARMUP, geanet_step_rows

    ours = _tiny_recipe(tmp_path, "tiny-geanet", True, graphs=8 * QUICK_STEP_RUN)  # a split of 2 x 40 and more
    reference = _tiny_recipe(tmp_path, "tiny-gcn", False, graphs=8 * QUICK_STEP_RUN)
    rows = geanet_step_rows(Settings.tiny(), recipes=[ours, reference])
    assert [r.name for r in rows] == ["MPNN+GEANet step [Peptides-func, batch 128]"]
    row = rows[0]
    assert row.ours > 0 and row.reference > 0 and row.ratio is not None and str(row.target) == "≤ 1.4"
    timed = QUICK_STEP_RUN - STEP_WARMUP
    assert f"median of {timed} / {timed} training steps" in row.note and "1 run(s) each of 40 steps" in row.note


def test_geanet_step_row_alternates_the_runs_and_drops_each_runs_first_steps(monkeypatch: pytest.MonkeyPatch):
    from gea_graph.bench.perf import training

    runs: list[tuple[str, int | None]] = []

    def run(name: str, steps: int | None, device: torch.device, overrides=()) -> list[float]:
        runs.append((name, steps))
        base = 2.0 if name == "ours" else 1.0
        return [100.0] * training.STEP_WARMUP + [base, base * 1.5, base * 0.5]  # the warm-up steps must not count

    monkeypatch.setattr(training, "timed_training_run", run)
    monkeypatch.setattr(training, "_prepare_data", lambda recipe: None)
    monkeypatch.setattr("gea_graph.train.recipe.load_recipe", lambda *a, **k: None)
    monkeypatch.setattr("gea_graph.train.recipe.resolve_recipe", lambda name: name)
    full = Settings(torch.device("cpu"), False, repeats=1, warmup=0, train_steps=1, spd_graphs=1)
    row = training.geanet_step_rows(full, recipes=["ours", "reference"])[0]
    assert runs == [("ours", None), ("reference", None), ("reference", None), ("ours", None)][:2 * training.STEP_RUNS]
    assert row.ours == pytest.approx(2000.0) and row.reference == pytest.approx(1000.0) and row.ratio == 2.0
    assert not row.met and "2 run(s) each of one epoch" in row.note
    runs.clear()
    training.geanet_step_rows(Settings.tiny(), recipes=["ours", "reference"])
    assert runs == [("ours", training.QUICK_STEP_RUN), ("reference", training.QUICK_STEP_RUN)]


def test_step_times_bracket_each_training_step(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import Callback

    from gea_graph.bench.perf.training import StepTimes
    from gea_graph.train import fit
    from gea_graph.train.recipe import load_recipe

    class Steps(Callback):
        def __init__(self) -> None:
            self.global_steps: list[int] = []

        def on_train_end(self, trainer, pl_module) -> None:
            self.global_steps.append(trainer.global_step)

    recipe = load_recipe(_tiny_recipe(tmp_path, "tiny", True, graphs=12), ["trainer.max_epochs=2"])
    timer, steps = StepTimes(), Steps()
    fit(recipe, tmp_path / "run", progress=False, callbacks=[timer, steps], verbose=False, accelerator="cpu",
        devices=1)
    assert steps.global_steps[0] >= 2 and len(timer.seconds) == steps.global_steps[0]  # one time per step
    assert all(t > 0 for t in timer.seconds)


def test_perf_models_run_on_the_device_of_their_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    # On an H200 the 'geanet' and 'predict' groups failed (a model left on the CPU, inputs on cuda:0, and back).
    # "meta" stands in for the GPU: the training step's model goes to its batch's device, and the reference predict
    # path moves each batch to its model's device and its predictions back to the host.
    from torch_geometric.data import Batch, Data

    from gea_graph import models
    from gea_graph.bench.perf import predict as perf_predict
    from gea_graph.bench.perf.training import MPNN_RECIPE, _training_step

    built = []
    real_build = models.build_model
    monkeypatch.setattr(models, "build_model", lambda cfg: built.append(real_build(cfg)) or built[-1])
    graph = Data(x=torch.zeros(3, 9, dtype=torch.long), edge_index=torch.tensor([[0, 1], [1, 2]]),
                 edge_attr=torch.zeros(2, 3, dtype=torch.long), y=torch.zeros(1, 10))
    _training_step(MPNN_RECIPE, Batch.from_data_list([graph]).to("meta"))
    assert {p.device.type for p in built[0].parameters()} == {"meta"}

    class Stub(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1, device="meta"))
            self.seen: list[str] = []

        def forward(self, batch):
            self.seen.append(batch.x.device.type)
            return torch.zeros(batch.num_graphs, 1)

    stub = Stub()
    out = perf_predict.reference_predict(stub, ["CCO", "c1ccccc1"], 4, 1)
    assert stub.seen == ["meta", "meta"] and out.shape == (2, 1)


def test_training_rss_row_measures_fresh_training_processes(tmp_path: Path) -> None:
    import yaml

    from gea_graph.bench.perf.training import suite_recipes, training_rss_rows

    assert suite_recipes() == ("gcn-peptides-func-cpu", "gcn-geanet-peptides-func-cpu", "geaet-peptides-func-cpu")
    recipe = {"data": {"cls": "torch_geometric.datasets.FakeDataset",
                       "options": {"num_graphs": 40, "avg_num_nodes": 6, "num_channels": 4, "edge_dim": 2,
                                   "num_classes": 3}},
              "model": {"family": "geaet", "task": "graph_classification", "out_channels": 3, "hidden": 8,
                        "layers": 1, "node_encoder": "linear", "node_in": 4, "edge_encoder": "linear", "edge_in": 2},
              "optim": {"lr": 0.01, "schedule": "constant"},
              "trainer": {"max_epochs": 5, "batch_size": 2, "seeds": [0]}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(recipe))
    rows = training_rss_rows(Settings.tiny(), recipes=[str(path)])
    assert [r.name for r in rows] == ["Peptides-func training run · peak RSS"]
    row = rows[0]
    assert row.unit == "MiB" and 50 < row.ours < 3072 and row.reference is None and row.met
    assert "6 steps each" in row.note and "tiny " in row.note


def test_perf_help_names_every_group():
    import argparse
    import re

    from gea_graph.bench.perf.suite import row_groups

    perf = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["perf"]
    only = next(a for a in perf._actions if "--only" in a.option_strings)
    words = set(re.findall(r"[a-z]+", only.help))
    assert set(row_groups()) <= words, set(row_groups()) - words


def test_size_grouped_attention_rows_time_the_same_attention_on_both_sides() -> None:
    # The row's two sides (grouped blocks, padded batch) agree, outputs and gradients, on mixed sizes with a
    # single-node graph.
    import numpy as np

    from gea_graph.bench.perf import attention as perf_attention
    from gea_graph.nn.attention import MultiheadAttention

    counts = np.array([5, 1, 9, 3])
    ptr = torch.tensor(np.concatenate([[0], np.cumsum(counts)]))
    batch = torch.repeat_interleave(torch.arange(4), torch.from_numpy(counts))
    module = MultiheadAttention(8, 2, impl="grouped")
    x = torch.randn(int(counts.sum()), 8)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a = perf_attention._plan_call(module, xa, ptr, batch, counts, int(counts.max()))
    b = perf_attention._dense_call(module, xb, batch, 4, int(counts.max()))
    assert a.shape == b.shape == (counts.sum(), 8)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(a)
    a.backward(grad)
    b.backward(grad)
    torch.testing.assert_close(xa.grad, xb.grad, atol=1e-5, rtol=1e-5)
