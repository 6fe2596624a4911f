"""Training on several processes: loaders that shard the split, batch norm over the global batch, and DDP runs of
the CLI on 2 CPU processes (gloo)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml
from torch.utils.data import BatchSampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler
from torch_geometric.data import Batch, Data

from gea_graph.cli import main
from gea_graph.data import GraphLoader
from gea_graph.nn import DistributedBatchNorm
from gea_graph.nn.norm import padding_rows
from gea_graph.train import GraphTask, load_checkpoint, load_recipe
from gea_graph.train.data import EpochSampler, ShardedBatchSampler, load_datasets, make_loader
from gea_graph.train.metrics import metric_input, prepare
from gea_graph.train.policy import resolve_precision

REPO = Path(__file__).resolve().parents[2]


def shards(order, batch_size, world):
    return [list(ShardedBatchSampler(order, batch_size, world=(rank, world))) for rank in range(world)]


@pytest.mark.parametrize(("size", "batch_size", "world"), [(37, 8, 2), (37, 8, 3), (33, 8, 2), (17, 4, 4),
                                                            (9, 9, 2), (8, 8, 8)])
def test_shards_are_disjoint_cover_the_split_and_reshuffle_every_epoch(size, batch_size, world):
    order = EpochSampler(range(size), seed=5)
    epochs = []
    for epoch in (0, 1, 0):
        order.set_epoch(epoch)
        one = list(order)
        parts = shards(order, batch_size, world)
        assert len({len(p) for p in parts}) == 1  # every process takes the same number of steps
        steps = list(zip(*parts))
        assert all(len(share) > 0 for step in steps for share in step)  # ... each with at least one graph
        flat = [i for step in steps for share in step for i in share]
        assert sorted(flat) == list(range(size))  # disjoint shards that cover the split: nothing counted twice
        start = 0
        for step in steps:  # each global batch holds the next graphs of the one-process order
            graphs = sorted(i for share in step for i in share)
            assert graphs == sorted(one[start:start + len(graphs)])
            assert len(graphs) < batch_size + world  # a batch of the recipe's size, the last with < W more
            start += len(graphs)
        epochs.append(parts)
    assert epochs[0] != epochs[1]  # reshuffled every epoch
    assert epochs[0] == epochs[2]  # the order depends on (seed, epoch) only: exact resume


def test_one_process_batches_are_a_plain_batch_sampler():
    order = EpochSampler(range(37), seed=1)
    assert list(ShardedBatchSampler(order, 8)) == list(BatchSampler(order, 8, drop_last=False))
    with pytest.raises(ValueError, match="3 graphs cannot give each of 4 processes"):
        list(ShardedBatchSampler(SequentialSampler(range(3)), 8, world=(0, 4)))
    with pytest.raises(ValueError, match="batch of 2 graphs.*at least 4"):
        len(ShardedBatchSampler(SequentialSampler(range(30)), 2, world=(1, 4)))


class Graphs:
    """A dataset with ``batch(indices)``, as GraphLoader takes (graph i has the feature i)."""

    def __init__(self, n):
        self.data = [Data(x=torch.full((2, 1), float(i)), edge_index=torch.tensor([[0, 1], [1, 0]]))
                     for i in range(n)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]

    def batch(self, index):
        return Batch.from_data_list([self.data[int(i)] for i in index])


def _ids(batch):
    return batch.x[::2, 0].long().tolist()


def test_lightning_recreates_a_shuffled_graph_loader_for_ddp():
    # What Lightning's Trainer does under DDP with use_distributed_sampler (its default), for a user's own loop:
    # re-create the loader from its attributes with a DistributedSampler. It used to refuse its own dataset view,
    # and would have read the loader as unshuffled (the same order every epoch).
    from lightning.fabric.utilities.data import _set_sampler_epoch
    from lightning.pytorch.utilities.data import _is_dataloader_shuffled, _update_dataloader

    loader = GraphLoader(Graphs(20), batch_size=4, shuffle=True)
    assert _is_dataloader_shuffled(loader)
    assert not _is_dataloader_shuffled(GraphLoader(Graphs(20), batch_size=4))
    orders = []
    for rank in (0, 1):
        sampler = DistributedSampler(loader.dataset, num_replicas=2, rank=rank, shuffle=True, seed=3)
        again = _update_dataloader(loader, sampler)
        assert isinstance(again, GraphLoader) and again.graph_dataset is loader.graph_dataset
        epochs = []
        for epoch in (0, 1):
            _set_sampler_epoch(again, epoch)
            epochs.append([i for batch in again for i in _ids(batch)])
        assert epochs[0] != epochs[1]  # reshuffled every epoch
        orders.append(epochs[0])
    assert sorted(orders[0] + orders[1]) == list(range(20))


def test_make_loader_shards_graph_and_pyg_loaders_alike():
    graphs = Graphs(11)
    for data in (graphs, graphs.data):  # GraphLoader, and PyG's DataLoader for a plain list
        loader = make_loader(data, 4, shuffle_seed=0)
        assert [_ids(b) for b in loader] == [list(b) for b in BatchSampler(EpochSampler(graphs, 0), 4, False)]
        loader.batch_sampler.world = (1, 2)  # process 1 of 2
        loader.batch_sampler.sampler.set_epoch(1)
        order = EpochSampler(graphs, 0)
        order.set_epoch(1)
        expected = shards(order, 4, 2)[1]
        assert [_ids(b) for b in loader] == expected


# -- batch norm over the global batch --------------------------------------------------------------------------


def _batch_norm_worker(rank, world, folder, x, weight, real=None):
    torch.set_num_threads(1)  # a forked child, as a DataLoader worker
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        norm = DistributedBatchNorm.convert(torch.nn.Sequential(torch.nn.BatchNorm1d(x.size(1))))[0]
        rows = x.tensor_split(world)[rank].clone().requires_grad_(True)
        if real is None:
            out = norm(rows)
        else:  # a fixed-size batch in each process: its padding rows are left out of the global statistics
            with padding_rows(real.tensor_split(world)[rank]):
                out = norm(rows)
        (out * weight.tensor_split(world)[rank]).sum().backward()
        torch.save({"out": out.detach(), "grad": rows.grad, "weight_grad": norm.weight.grad,
                    "running_var": norm.running_var.clone()}, f"{folder}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_distributed_batch_norm_equals_one_process_on_the_global_batch(tmp_path):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(11, 3, generator=gen) * 3 + 1  # 11 rows: shares of 6 and 5
    weight = torch.randn(11, 3, generator=gen)
    # two gloo processes meeting through a file (no port to collide with parallel tests), forked: no re-import
    mp.start_processes(_batch_norm_worker, args=(2, str(tmp_path), x, weight), nprocs=2, start_method="fork")
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    reference = torch.nn.BatchNorm1d(3)
    rows = x.clone().requires_grad_(True)
    out = reference(rows)
    (out * weight).sum().backward()
    torch.testing.assert_close(torch.cat([results[0]["out"], results[1]["out"]]), out.detach())
    torch.testing.assert_close(torch.cat([results[0]["grad"], results[1]["grad"]]), rows.grad)
    # DDP sums (averages) the processes' parameter gradients; with a summed loss their sum is the global one
    torch.testing.assert_close(results[0]["weight_grad"] + results[1]["weight_grad"], reference.weight.grad)
    torch.testing.assert_close(results[0]["running_var"], reference.running_var)
    torch.testing.assert_close(results[1]["running_var"], reference.running_var)


def test_distributed_batch_norm_of_padded_batches_equals_one_process_on_the_global_real_rows(tmp_path):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(12, 3, generator=gen) * 3 + 1  # shares of 6 rows, 4 and 5 of them real
    real = torch.tensor([1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1], dtype=torch.bool)
    x[~real] = float("inf")
    weight = torch.randn(12, 3, generator=gen) * real[:, None]
    mp.start_processes(_batch_norm_worker, args=(2, str(tmp_path), x, weight, real), nprocs=2, start_method="fork")
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    reference = torch.nn.BatchNorm1d(3)
    rows = x[real].clone().requires_grad_(True)
    out = reference(rows)
    (out * weight[real]).sum().backward()
    shares = real.tensor_split(2)
    torch.testing.assert_close(torch.cat([results[r]["out"][shares[r]] for r in (0, 1)]), out.detach())
    torch.testing.assert_close(torch.cat([results[r]["grad"][shares[r]] for r in (0, 1)]), rows.grad)
    assert all((results[r]["grad"][~shares[r]] == 0).all() for r in (0, 1))
    torch.testing.assert_close(results[0]["weight_grad"] + results[1]["weight_grad"], reference.weight.grad)
    torch.testing.assert_close(results[0]["running_var"], reference.running_var)
    torch.testing.assert_close(results[1]["running_var"], reference.running_var)


def test_distributed_batch_norm_converts_and_reverts_keeping_the_state():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3), torch.nn.ReLU())
    model(torch.randn(5, 3))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    converted = DistributedBatchNorm.convert(model)
    assert isinstance(converted[1], DistributedBatchNorm)
    assert converted.state_dict().keys() == state.keys()
    x = torch.randn(6, 3)
    converted.eval()
    expected = converted(x)
    reverted = DistributedBatchNorm.revert(converted)
    assert type(reverted[1]) is torch.nn.BatchNorm1d and not reverted.training
    torch.testing.assert_close(reverted(x), expected)  # without a process group: plain batch norm


def test_precision_auto_is_float32_everywhere(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_precision("auto", "gpu") == "32-true"  # it used to be bf16-mixed on a bf16-capable GPU
    assert resolve_precision("auto", "cpu") == "32-true"
    assert resolve_precision("bf16-mixed", "gpu") == "bf16-mixed"  # opt-in


# -- the CLI on 2 processes ------------------------------------------------------------------------------------


def run_cli(args, cwd, attempts=3):
    """``python -m gea_graph ARGS`` in a subprocess, waiting as long as it takes (no timing dependence). A DDP run
    picks a free port for its rendezvous; should another process take that port in between (parallel tests on a
    shared machine), the run fails at its start with 'address already in use' and is started again."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("MASTER_PORT", None)
    for _ in range(attempts):
        proc = subprocess.run([sys.executable, "-m", "gea_graph", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, check=False)
        if proc.returncode == 0 or "address already in use" not in proc.stderr.lower():
            return proc
    return proc


#: ZINC as the session's shared build holds it (LapPE-8 and RWPE-20), 33 graphs a split, and small batches.
ZINC_DATA = ["data.subset=33", "data.pe=lap:8,rw:20", "trainer.max_epochs=2", "trainer.batch_size=8",
             "trainer.eval_batch_size=6"]
TINY_GEAET = ["model.hidden=16", "model.layers=2", "model.heads=2", "model.gea_heads=2", "model.pe.dim=4"]


def test_readme_ddp_command_trains_zinc_on_two_processes_counting_every_graph_once(zinc, shared_data_root,
                                                                                    tmp_path):
    # The README's `gea-graph train geaet-zinc --devices 4 --strategy ddp`, on 2 CPU processes (gloo) and a tiny
    # model: 33 validation graphs, an odd number that a DistributedSampler would pad with a repeated graph. With
    # trainer.eval_train, the best checkpoint's metric on the (sharded) training split too. With a time cap (not
    # reached) both processes take part in each epoch-end check of it (EndAtTimeCap's broadcast).
    out = tmp_path / "run"
    overrides = [*ZINC_DATA, *TINY_GEAET, f"data.root={shared_data_root}", "trainer.eval_train=true"]
    proc = run_cli(["train", "geaet-zinc", *overrides, "--out", str(out), "--accelerator", "cpu", "--devices", "2",
                    "--strategy", "ddp", "--threads", "1", "--no-progress", "--max-time", "60"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["epochs"] == 2
    assert (result["world_size"], result["global_batch_size"], result["batch_size_per_process"]) == (2, 8, 4)
    assert result["precision"] == "32-true" and result["sync_batchnorm"] and not result["deterministic"]
    # One process evaluates the best checkpoint on the whole validation split: the same metric.
    ckpt = load_checkpoint(out / "checkpoints" / "best.ckpt")
    task = GraphTask(ckpt["hyper_parameters"]["recipe"])
    task.load_state_dict(ckpt["state_dict"])
    task.eval()
    splits = load_datasets(load_recipe("geaet-zinc", overrides).data)
    assert len(splits["val"]) == len(splits["train"]) == 33
    for split in ("val", "train"):
        metric = task.val_metric
        metric.reset()
        with torch.no_grad():
            for batch in make_loader(splits[split], 6):
                metric.update(*metric_input(task.metric_name, *prepare(task.model(batch), batch, task.task)))
        assert float(metric.compute()) == pytest.approx(result[split], rel=1e-5), split


def test_devices_without_a_strategy_and_a_batch_that_does_not_divide(zinc, shared_data_root, tmp_path,
                                                                     capsys):
    # `--devices 2` alone (Lightning's DDP without a search for unused parameters) trains; a global batch that the
    # processes cannot share evenly is refused before training, naming the values.
    overrides = [*ZINC_DATA, "model.hidden=16", "model.layers=2", f"data.root={shared_data_root}",
                 "trainer.max_epochs=1"]
    proc = run_cli(["train", "gatedgcn-zinc", *overrides, "--out", str(tmp_path / "a"), "--accelerator", "cpu",
                    "--devices", "2", "--threads", "1", "--no-progress"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads((tmp_path / "a" / "result.json").read_text())["world_size"] == 2

    code = main(["train", "gatedgcn-zinc", *overrides, "trainer.batch_size=7", "--out", str(tmp_path / "b"),
                 "--accelerator", "cpu", "--devices", "2", "--no-progress"])
    assert code == 2
    assert "trainer.batch_size 7 is the global batch and must be a multiple of the 2" in capsys.readouterr().err
    assert not (tmp_path / "b" / "checkpoints").exists()


def test_workers_by_default_only_where_a_gpu_waits_for_data(monkeypatch):
    from gea_graph.train.policy import default_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert default_workers(cuda=True, processes_per_node=1) == 2  # gather and pin the next batches meanwhile
    assert default_workers(cuda=True, processes_per_node=8) == 0  # 2 cores a process: none to spare
    assert default_workers(cuda=False, processes_per_node=1) == 0  # workers would take the training's cores


def test_a_run_made_before_the_new_trainer_keys_still_resumes(tmp_path):
    # recipe.yaml of runs made before trainer.deterministic existed lacks it: its default (off) is what they ran.
    from gea_graph.train import check_run_dir, recipe_from_dict
    from gea_graph.train.recipe import RecipeError

    from .test_training import FAKE

    recipe = recipe_from_dict(FAKE, name="fake")
    stored = recipe.to_dict()
    del stored["trainer"]["deterministic"]
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(stored))
    check_run_dir(tmp_path, recipe)
    deterministic = recipe_from_dict({**FAKE, "trainer": {**FAKE["trainer"], "deterministic": True}}, name="fake")
    with pytest.raises(RecipeError, match="trainer.deterministic: False -> True"):
        check_run_dir(tmp_path, deterministic)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass
    return kids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the DDP worker through /proc")
def test_a_killed_ddp_process_ends_the_run_in_one_line_naming_resume(tmp_path):
    # Issue 49, R7: `gea-graph train --devices 2` on CPU, its second process killed after the first checkpoint: the
    # launcher ends with one line that names --resume (not gloo's traceback), and --resume then finishes the run.
    import signal
    import time

    out = tmp_path / "run"
    argv = ["train", "gin-tree-r2", "model.hidden=8", "model.layers=1", "data.subset=256", "trainer.max_epochs=20",
            "--out", str(out), "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--threads", "1",
            "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "gea_graph", *argv], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    killed = False
    while proc.poll() is None and not killed:
        time.sleep(0.2)
        if (out / "checkpoints" / "last.ckpt").exists():
            for pid in _children(proc.pid):
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"LOCAL_RANK=1" in environ:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
    _, stderr = proc.communicate()
    assert killed, stderr[-3000:]
    assert proc.returncode == 2, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("gea-graph train: error: a training process of this 2-process run ended"), stderr[-3000:]
    assert "--resume" in last and "Traceback" not in stderr and "[rank0]" not in stderr, stderr[-3000:]

    # the guarded feature: the same command with --resume finishes the run
    resumed = run_cli([*argv, "--resume"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((out / "result.json").read_text())["world_size"] == 2
