"""The whole-step host-transfer census (both directions) and the fused, capturable optimiser."""
import numpy as np
import torch

from gea_graph.models.synthetic import synthetic_batch
from gea_graph.train import fixed_size, load_recipe
from gea_graph.train.module import GraphTask, build_optimizer, cosine_with_warmup, labelled
from gea_graph.train.transfer_census import TransferCensus, step_transfers


def test_census_sees_both_directions():
    x = torch.randn(5)
    with TransferCensus() as census:
        torch.tensor([1.0, 2.0])  # made from host data: a copy to the device on a GPU
        torch.as_tensor(3)
        float(x.sum())  # a value read on the host
        x[x > 0]  # boolean indexing: an output size read on the host
        x.tolist()
        x + 1  # a Python number as a kernel argument: no copy
        torch.full((2,), 4.0)
    assert census.by_direction() == {"device->host": 3, "host->device": 2}, census.report()
    assert "test_transfer_census.py" in census.report()


def test_fixed_size_step_makes_no_transfer_and_the_boolean_loss_would():
    recipe = load_recipe("geaet-zinc-quick", ["model.hidden=16", "model.layers=1", "model.attn_impl=dense",
                                              "trainer.fixed_size=true"])
    task = GraphTask(recipe.to_dict()).train()
    sizes = (5, 9, 1, 12)
    batch = synthetic_batch(recipe.model, recipe.data.pe, sizes)
    shape = fixed_size.plan_shapes(np.array(sizes), 2 * np.array(sizes), len(sizes))[-1]
    padded = fixed_size.pad_batch(batch, shape)
    optimizer = build_optimizer(task.parameters(), recipe.optim, fused=True)
    assert isinstance(optimizer.param_groups[0]["lr"], torch.Tensor) and optimizer.defaults["capturable"]
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(2, 10))
    lr = optimizer.param_groups[0]["lr"]

    def loss_of():
        padded.__dict__["_gea_host_sizes"] = {"max_num_nodes": shape.max_nodes}
        return task.training_step(padded, 0)

    params = list(task.parameters())
    for _ in range(2):
        step_transfers(loss_of, params, optimizer, 1.0, schedule)
    census = step_transfers(loss_of, params, optimizer, 1.0, schedule)
    assert census.count == 0, census.report()
    assert optimizer.param_groups[0]["lr"] is lr  # the schedule writes the rate tensor in place

    def boolean_loss():  # the old loss: labelled cells by boolean indexing
        pred, target = labelled(task(batch).view(-1, 1), batch.y.view(-1, 1), "graph_regression")
        return (pred - target).abs().mean()

    assert step_transfers(boolean_loss, params, optimizer).by_direction()["device->host"] >= 2
