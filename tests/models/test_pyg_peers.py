"""The PyG peers (``family: pyg_gps`` / ``pyg_gine``): PyG's classes in the structure of PyG's
``examples/graph_gps.py``, its parameter count, its forward, the config checks, and the plateau schedule."""
import itertools
import math

import pytest
import torch
from torch.nn import (
    BatchNorm1d,
    Embedding,
    Linear,
    ModuleList,
    MultiheadAttention,
    ReLU,
    Sequential,
)
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GINEConv, GPSConv, global_add_pool

from gea_graph.models import ModelConfig, PyGGINE, PyGGPS, build_model, count_parameters
from gea_graph.train import GraphTask, load_recipe


def test_gps_peer_has_the_examples_parameter_count():
    model = build_model(load_recipe("pyg-gps-zinc").model)
    assert isinstance(model, PyGGPS)
    d = 64
    gine_mlp = 2 * (d * d + d)                                   # Linear(64, 64) x 2 (GINE's eps is not trained)
    attention = 3 * d * d + 3 * d + d * d + d                    # MultiheadAttention in/out projections
    ffn = (d * 2 * d + 2 * d) + (2 * d * d + d)                  # GPSConv's MLP 64 -> 128 -> 64
    norms = 3 * 2 * d                                            # GPSConv's three BatchNorms
    layer = gine_mlp + attention + ffn + norms
    encoders = 28 * 56 + (20 * 8 + 8) + 2 * 20 + 4 * 64          # atom emb, RWPE Linear, RWPE BatchNorm, bond emb
    head = (64 * 32 + 32) + (32 * 16 + 16) + (16 + 1)
    assert layer == 41_920
    assert count_parameters(model) == 10 * layer + encoders + head == 423_857
    assert len(model.convs) == 10
    for conv in model.convs:
        assert isinstance(conv.conv, GINEConv) and isinstance(conv.attn, MultiheadAttention)
        assert conv.attn.num_heads == 4 and conv.attn.dropout == 0.5


def test_gine_peer_is_the_same_size_without_attention():
    model = build_model(load_recipe("pyg-gine-zinc").model)
    assert isinstance(model, PyGGINE)
    layer = 2 * (64 * 64 + 64) + 2 * 64                          # GINE MLP + BatchNorm
    assert count_parameters(model) == 10 * layer + 2032 + 2625 == 89_137  # encoders and head as above
    assert not any(isinstance(m, MultiheadAttention) for m in model.modules())


class ExampleGPS(torch.nn.Module):
    """The structure of PyG's examples/graph_gps.py, built here independently, to check the peer's forward."""

    def __init__(self, channels=64, pe_dim=8, num_layers=2):
        super().__init__()
        self.node_emb = Embedding(28, channels - pe_dim)
        self.pe_norm = BatchNorm1d(20)
        self.pe_lin = Linear(20, pe_dim)
        self.edge_emb = Embedding(4, channels)
        self.convs = ModuleList(
            GPSConv(channels, GINEConv(Sequential(Linear(channels, channels), ReLU(), Linear(channels, channels))),
                    heads=4, attn_type="multihead", attn_kwargs={"dropout": 0.5})
            for _ in range(num_layers))
        self.mlp = Sequential(Linear(channels, channels // 2), ReLU(), Linear(channels // 2, channels // 4), ReLU(),
                              Linear(channels // 4, 1))

    def forward(self, x, pe, edge_index, edge_attr, batch):
        x = torch.cat((self.node_emb(x.squeeze(-1)), self.pe_lin(self.pe_norm(pe))), 1)
        edge_attr = self.edge_emb(edge_attr.squeeze(-1))
        for conv in self.convs:
            x = conv(x, edge_index, batch, edge_attr=edge_attr)
        return self.mlp(global_add_pool(x, batch))


def _zinc_like_batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for n in (5, 8, 6):
        src = torch.arange(1, n)
        dst = torch.randint(0, n, (n - 1,), generator=gen) % src
        ei = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)
        bond = torch.randint(1, 4, (n - 1, 1), generator=gen)
        graphs.append(Data(x=torch.randint(0, 28, (n, 1), generator=gen), edge_index=ei,
                           edge_attr=torch.cat([bond, bond]), rw_pe=torch.rand(n, 20, generator=gen),
                           y=torch.randn(1, 1, generator=gen)))
    return Batch.from_data_list(graphs)


def test_gps_peer_computes_what_the_example_computes():
    cfg = load_recipe("pyg-gps-zinc", ["model.layers=2"]).model
    torch.manual_seed(0)
    ours = build_model(cfg).eval()
    ref = ExampleGPS(num_layers=2).eval()
    # Same parameters, registered in the same order (encoders, PE norm and map, convs, head).
    ref_state = list(ref.state_dict().values())
    ours_state = list(ours.state_dict().values())
    assert [t.shape for t in ref_state] == [t.shape for t in ours_state]
    ref.load_state_dict(dict(zip(ref.state_dict(), ours_state)))
    batch = _zinc_like_batch()
    expected = ref(batch.x, batch.rw_pe, batch.edge_index, batch.edge_attr, batch.batch)
    torch.testing.assert_close(ours(batch), expected)


@pytest.mark.parametrize("change, message", [
    ({"family": "pyg_gps", "attn": None}, "attn"),
    ({"family": "pyg_gine", "attn": "softmax"}, "attn"),
    ({"family": "pyg_gps", "mpnn": "gatedgcn"}, "GINEConv"),
    ({"family": "pyg_gine", "attn": None, "gea": True}, "no GEANet"),
])
def test_peer_configs_reject_choices_pyg_does_not_offer(change, message):
    base = {"task": "graph_regression", "out_channels": 1, "hidden": 16, "layers": 1, "mpnn": "gine",
            "attn": "softmax", "gea": False}
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**base, **change})


def test_plateau_schedule_and_adam_follow_the_recipe():
    recipe = load_recipe("pyg-gine-zinc", ["model.layers=1"])
    task = GraphTask(recipe.to_dict())
    conf = task.configure_optimizers()
    assert type(conf["optimizer"]) is torch.optim.Adam
    sched = conf["lr_scheduler"]
    plateau = sched["scheduler"]
    assert isinstance(plateau, torch.optim.lr_scheduler.ReduceLROnPlateau)
    assert sched["monitor"] == "val/metric" and sched["interval"] == "epoch"
    assert plateau.mode == "min" and plateau.factor == 0.5 and plateau.patience == 20
    assert plateau.min_lrs == [1e-5]
    with pytest.raises(ValueError, match="optim.optimizer: 'sgd'"):
        load_recipe("pyg-gine-zinc", ["optim.optimizer=sgd"])


def test_peer_trains_with_the_plateau_schedule_through_lightning(tmp_path):
    import csv

    import yaml

    from gea_graph.train import fit

    raw = {
        "data": {"cls": "torch_geometric.datasets.FakeDataset",
                 "options": {"num_graphs": 24, "avg_num_nodes": 5, "num_channels": 3, "edge_dim": 2,
                             "num_classes": 2}},
        "model": {"family": "pyg_gine", "task": "graph_classification", "out_channels": 2, "hidden": 8, "layers": 1,
                  "node_encoder": "linear", "node_in": 3, "edge_encoder": "linear", "edge_in": 2, "mpnn": "gine",
                  "attn": None, "gea": False},
        "optim": {"optimizer": "adam", "lr": 0.01, "schedule": "plateau", "patience": 0, "factor": 0.5, "clip": None},
        "trainer": {"max_epochs": 4, "batch_size": 8},
    }
    path = tmp_path / "peer.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = fit(load_recipe(path), tmp_path / "run", accelerator="cpu", progress=False, verbose=False)
    assert result["epochs"] == 4
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    # patience 0: after each epoch the rate halves unless that epoch's validation accuracy was a new best (max mode,
    # PyTorch's relative threshold 1e-4); the rate in a row is the one the epoch trained with.
    best = -math.inf
    for prev, row in itertools.pairwise(rows):
        val = float(prev["val"])
        improved = val > best * (1 + 1e-4) if best > 0 else val > best
        best = val if improved else best
        assert float(row["lr"]) == pytest.approx(float(prev["lr"]) * (1.0 if improved else 0.5))
    assert float(rows[0]["lr"]) == pytest.approx(0.01)
