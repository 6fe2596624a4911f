r"""The LightningModule of every recipe: loss, metrics (validation and test every epoch, test read at the best
validation epoch as in GraphGPS), Adam(W) and the learning-rate schedules."""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import lightning as L
import torch
import torchmetrics
from lightning.pytorch.callbacks import Timer
from torch import Tensor
from torch_geometric.data import Batch
from torch_geometric.data.data import BaseData

from gea_graph.data.device import host_ptr
from gea_graph.models import build_model, count_parameters
from gea_graph.models.networks import GraphModel, host_sizes
from gea_graph.nn.norm import DistributedBatchNorm
from gea_graph.train import fixed_size
from gea_graph.train.checkpoint import RECORD_KEY, checkpoint_record
from gea_graph.train.metrics import (
    HIGHER_IS_BETTER,
    LinkTargets,
    WeightedMean,
    loss_fn,
    make_metric,
    masked_loss,
    metric_input,
    metric_values,
    prepare,
    resolve_task,
)
from gea_graph.train.recipe import OptimConfig, recipe_from_dict


def time_cap(trainer: L.Trainer) -> Timer | None:
    r"""The Lightning :class:`~lightning.pytorch.callbacks.Timer` of a run with a wall-clock cap (``max_time``): it
    holds the cap and the training time so far (restored from checkpoints on resume). :obj:`None` without a cap."""
    return next((c for c in trainer.callbacks if isinstance(c, Timer)), None)


def build_optimizer(parameters: Iterable[Tensor], opt: OptimConfig, fused: bool = False) -> torch.optim.Optimizer:
    r"""The recipe's optimiser (``torch.optim.AdamW``, or ``torch.optim.Adam`` for ``optim.optimizer: adam``) over
    :obj:`parameters`, with its rate, betas, epsilon and weight decay.

    With :obj:`fused` (every parameter a floating tensor on CPU or CUDA) it is PyTorch's fused, ``capturable``
    implementation with the rate a tensor on the parameters' device (schedules write it in place): one kernel per
    step where the default is a loop of about ten operators per parameter tensor, and step counters that never
    leave the device, so that a CUDA graph can hold the update. Training uses it on CUDA
    (:meth:`GraphTask.configure_optimizers`); CPU runs keep the default loop."""
    params = list(parameters)
    cls = torch.optim.Adam if opt.optimizer == "adam" else torch.optim.AdamW
    fused = fused and bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda")
                                           for p in params)
    lr: float | Tensor = torch.tensor(float(opt.lr), device=params[0].device) if fused else opt.lr
    return cls(params, lr=lr, betas=tuple(opt.betas), eps=opt.eps, weight_decay=opt.weight_decay,
               fused=True if fused else None, capturable=fused)


def cosine_with_warmup(warmup: int, total: int) -> Callable[[int], float]:
    r"""Learning-rate factor per epoch: linear warm-up from ~0 over ``warmup`` epochs, then half a cosine to 0 at
    ``total`` (GraphGPS's ``cosine_with_warmup``)."""

    def factor(step: int) -> float:
        if step < warmup:
            return max(1e-6, step / max(1, warmup))
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    return factor


def cosine_over_time(fraction: Callable[[], float]) -> Callable[[int], float]:
    r"""Learning-rate factor read at each step from ``fraction()``, the share of the run's time budget used so far:
    :math:`\frac{1}{2}(1 + \cos(\pi \min(f, 1)))` (1 at the start, 0 when the budget is spent)."""

    def factor(step: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * min(max(fraction(), 0.0), 1.0)))

    return factor


def polynomial_with_warmup(warmup: int, total: int, lr: float, end_lr: float,
                           power: float) -> Callable[[int], float]:
    r"""Learning-rate factor per step: linear warm-up to the peak over ``warmup`` steps, then polynomial decay of
    ``power`` to ``end_lr`` at ``total`` steps, constant after (Graphormer's ``PolynomialDecayLR``)."""

    def factor(step: int) -> float:
        if warmup > 0 and step <= warmup:
            return step / warmup
        if step >= total:
            return end_lr / lr
        remaining = 1.0 - (step - warmup) / max(1, total - warmup)
        return ((lr - end_lr) * remaining ** power + end_lr) / lr

    return factor


_MASKED_TASKS = ("graph_regression", "graph_multilabel")

#: Where :meth:`GraphTask.on_before_batch_transfer` keeps a batch's host-side sizes (in the ``Batch`` object's own
#: ``__dict__``, apart from its data, so that moving the batch keeps them and nothing else sees them).
_HOST_SIZES = "_gea_host_sizes"


def labelled(pred: Tensor, target: Tensor, task: str) -> tuple[Tensor, Tensor]:
    r"""Drops missing (NaN) targets of regression and multi-label tasks, per target, as OGB's examples do
    (``is_labeled = y == y``): returns the labelled cells ``[M]`` of ``pred`` and ``target``. Other tasks are
    returned unchanged (their data may have no NaN; :func:`gea_graph.train.data.check_splits` refuses it).
    Boolean indexing (a host sync on a GPU): training masks instead (:func:`~gea_graph.train.metrics.masked_loss`),
    this is for reading results on the host."""
    if task not in _MASKED_TASKS or not target.is_floating_point():
        return pred, target
    mask = ~torch.isnan(target)
    return pred[mask], target[mask]


def real_rows(batch, task: str) -> Tensor | None:
    r"""The padded batch's mask of the rows a prediction has (nodes for node classification, else graphs); ``None``
    for a batch without padding."""
    if not fixed_size.is_padded(batch):
        return None
    return batch.node_mask if task == "node_classification" else batch.graph_mask


def use_fixed_size(trainer_cfg: Any, model_cfg: Any) -> bool:
    r"""Whether a run pads its batches (``trainer.fixed_size``: ``auto`` where the step is compiled with CUDA
    graphs, i.e. ``trainer.compile: reduce-overhead``); a clear error where ``true`` asks for a model that cannot."""
    why = fixed_size.supported(model_cfg)
    if trainer_cfg.fixed_size == "auto":
        return trainer_cfg.compile == "reduce-overhead" and why is None
    if trainer_cfg.fixed_size and why is not None:
        raise ValueError(f"trainer.fixed_size: true cannot pad batches for this model: {why}")
    return bool(trainer_cfg.fixed_size)


def target_count(target: Tensor | LinkTargets) -> int:
    r"""How many targets a batch has (link ranking: its positive pairs)."""
    return target.index.numel() if isinstance(target, LinkTargets) else target.numel()


class GraphTask(L.LightningModule):
    r"""Trains the model of a recipe.

    Every epoch runs the validation and the test loader (``dataloader_idx`` 0 and 1), computes both metrics with
    torchmetrics (synchronised across processes under DDP) and appends a row to :attr:`history` (also saved in the
    checkpoints, so a resumed run keeps it). :meth:`best` is the row of the best validation metric. Lightning's test
    stage evaluates the training split (``trainer.eval_train``: the metric into :attr:`train_result`).

    Args:
        recipe (dict): The recipe as plain types (:meth:`Recipe.to_dict`), stored as the checkpoint's
            hyper-parameters so that checkpoints load with ``weights_only=True``.
        seed (int): The run's seed (re-seeds the global RNG at every step, for exact resume).
    """

    def __init__(self, recipe: dict[str, Any], seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.recipe = recipe_from_dict(recipe)
        self.seed = seed
        self.model = build_model(self.recipe.model)
        tr = self.recipe.trainer
        self.loss_name, self.metric_name = resolve_task(self.recipe.model, tr.loss, tr.metric)
        self.loss = loss_fn(self.loss_name)
        self.task = self.recipe.model.task
        self.val_metric = make_metric(self.metric_name, self.recipe.model)
        self.test_metric = make_metric(self.metric_name, self.recipe.model)
        self.train_metric = make_metric(self.metric_name, self.recipe.model)  # trainer.eval_train's
        #: ``(metric, further values)`` of the training split after :meth:`on_test_epoch_end` (else ``None``)
        self.train_result: tuple[float, dict[str, float]] | None = None
        # no NaN check (a host sync per step): a NaN loss shows as a NaN epoch loss
        self.train_loss = WeightedMean()
        self.history: list[dict[str, float]] = []
        self._epoch_start = 0.0
        #: Fixed-size batches (trainer.fixed_size): their shapes per loader, planned on first use
        self.fixed_size = use_fixed_size(tr, self.recipe.model)
        self._shapes: dict[Any, tuple[list[fixed_size.FixedShape], dict[str, str]]] = {}
        if self.fixed_size:  # batch norm over the real rows of a padded batch (the state dict does not change)
            self.model = DistributedBatchNorm.convert(self.model)
        # trainer.compile: the compiled model shares the model's parameters (not a submodule: the state dict stays)
        backend = "inductor" if tr.compile in (True, "reduce-overhead") else tr.compile
        mode = "reduce-overhead" if tr.compile == "reduce-overhead" else None
        self.__dict__["_compiled"] = self.__dict__["_compiled_step"] = None
        # A run's compiled graphs count against their own recompile limit, not those of earlier runs in the process
        # (sweep trials, tests); past it, fullgraph=True stops the run.
        if backend and self.fixed_size:  # static shapes: forward and loss as one graph per fixed shape
            self.__dict__["_compiled_step"] = torch.compile(
                fixed_size.predict_and_loss, fullgraph=True, dynamic=False, backend=backend, mode=mode,
                recompile_limit=fixed_size.MAX_COMPILED_GRAPHS, isolate_recompiles=True)
        elif backend:  # dynamic shapes: sizes are symbols, so a new batch size does not compile again
            self.__dict__["_compiled"] = torch.compile(self.model, dynamic=True, fullgraph=True, backend=backend,
                                                       mode=mode, isolate_recompiles=True)
        self._cuda_graphs = mode == "reduce-overhead"

    def fixed_shapes(self) -> list[fixed_size.FixedShape]:
        r"""Every fixed shape planned so far (all splits): a fixed-size compiled run compiles at most one graph for
        each (and for each of training and evaluation that uses it)."""
        return [shape for shapes, _ in self._shapes.values() for shape in shapes]

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.metric_name]

    def num_parameters(self) -> int:
        return count_parameters(self.model)

    def forward(self, batch) -> Tensor:
        r"""The model's predictions for ``batch``, given the sizes that :meth:`on_before_batch_transfer` read on the
        host (so the model makes no host sync), compiled when ``trainer.compile`` is on."""
        return self._predict(batch)[0]

    def _predict(self, batch) -> tuple[Tensor, Tensor | None]:
        # (predictions, the masked loss where the fixed-size step computed it in its compiled graph, else None)
        sizes = batch.__dict__.pop(_HOST_SIZES, {})
        if self._cuda_graphs and torch.cuda.is_available():  # the last step's outputs are no longer read
            torch.compiler.cudagraph_mark_step_begin()
        with fixed_size.padding(batch):  # batch norm leaves a padded batch's padding rows out
            if self._compiled_step is not None and fixed_size.is_padded(batch):
                return self._compiled_step(self.model, batch, sizes.get("max_num_nodes"), self.loss_name, self.task)
            if self._compiled is not None:  # the per-graph counts would be guarded on: the compiled model plans
                return self._compiled(batch, **{k: v for k, v in sizes.items() if k == "max_num_nodes"}), None
            return self.model(batch, **sizes), None

    def _loader_shapes(self, dataloader_idx: int) -> tuple[list[fixed_size.FixedShape], dict[str, str]]:
        # The fixed shapes of the split the running loader reads, planned once from all its graphs.
        trainer = self.trainer
        if trainer.training:
            loader = trainer.train_dataloader
        else:
            loaders = trainer.test_dataloaders if trainer.testing else trainer.val_dataloaders
            loader = loaders[dataloader_idx] if isinstance(loaders, (list, tuple)) else loaders
        dataset = getattr(loader, "graph_dataset", None) or loader.dataset
        batch_size, world = loader.batch_sampler.batch_size, trainer.world_size
        key = (id(dataset), batch_size, world)
        if key not in self._shapes:
            # each process pads its share of a global batch (a last batch too small to share joins the one before)
            shard = -(-(batch_size + world - 1) // world)
            nodes, edges = fixed_size.graph_sizes(dataset)
            first = dataset.batch(range(min(len(dataset), 256))) if callable(getattr(dataset, "batch", None)) \
                else Batch.from_data_list([dataset[i] for i in range(min(len(dataset), 256))])
            self._shapes[key] = (fixed_size.plan_shapes(nodes, edges, shard), fixed_size.field_kinds(first))
        return self._shapes[key]

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        # The batch is still where the loader made it (the CPU, or the device for a split kept there, whose node
        # offsets are also on the host): it is padded and its sizes are read here, from the host.
        ptr = host_ptr(batch)
        if ptr is None:
            return batch
        if self.fixed_size and not fixed_size.is_padded(batch):
            shapes, kinds = self._loader_shapes(dataloader_idx)
            shape = fixed_size.choose_shape(shapes, batch)
            batch = fixed_size.pad_batch(batch, shape, kinds)
            if isinstance(self.model, GraphModel):
                batch.__dict__[_HOST_SIZES] = {**host_sizes(batch, host_ptr(batch)), "max_num_nodes": shape.max_nodes}
        elif isinstance(self.model, GraphModel):
            batch.__dict__[_HOST_SIZES] = host_sizes(batch, ptr)
        return batch

    def transfer_batch_to_device(self, batch, device: torch.device, dataloader_idx: int):
        # non_blocking: a batch from pinned memory (the loaders pin on a GPU) is copied while the host goes on;
        # Lightning's default moves a PyG batch with blocking copies
        if isinstance(batch, BaseData):
            return batch.to(device, non_blocking=True)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    # -- training -------------------------------------------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        self._epoch_start = time.perf_counter()

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        # The RNG stream of a step (dropout, sign flips) depends only on (seed, step, rank): a resumed run is exact.
        torch.manual_seed((self.seed * 1_000_003 + self.global_step) * 64 + self.global_rank)

    def training_step(self, batch, batch_idx: int) -> Tensor:
        out, loss = self._predict(batch)
        pred, target = prepare(out, batch, self.task)
        rows = real_rows(batch, self.task)
        if isinstance(target, LinkTargets):
            # a batch without any positive pair contributes 0 (not NaN) and keeps the graph connected
            loss = self.loss(pred, target) if target_count(target) else pred.sum() * 0.0
        elif loss is None:  # (else the compiled fixed-size step computed it) a masked mean over the labelled cells
            loss = masked_loss(self.loss_name, pred, target, rows)  # of the real rows: no host sync
        aux = self.model.aux_loss()
        total = loss + aux
        # The epoch's mean loss accumulates on the device (weighted by the step's graphs, a device tensor for a
        # padded batch) and is read at the epoch's end; a padded batch's step logs nothing else (Lightning reads
        # logged values on the host every log_every_n_steps).
        size = batch.num_graphs if rows is None else batch.graph_mask.sum()
        self.train_loss.update(loss.detach().float(), weight=size)
        if rows is None:
            # Not on the progress bar: Lightning turns progress-bar values into Python floats at every step (a
            # host sync per step on a GPU). The bar shows val/test.
            self.log("train/loss", loss, batch_size=batch.num_graphs)
            if aux.requires_grad:  # the model has an auxiliary loss (AGF) and it is on
                self.log("train/aux_loss", aux, batch_size=batch.num_graphs)
        return total

    # -- evaluation -----------------------------------------------------------------------------------------------
    def _update_metric(self, metric: torchmetrics.Metric, batch) -> None:
        pred, target = prepare(self(batch), batch, self.task)
        if isinstance(target, LinkTargets) and target_count(target) == 0:
            return
        # missing labels and padding rows weigh 0 / are the ignore_index: no host sync
        metric.update(*metric_input(self.metric_name, pred, target, real_rows(batch, self.task)))

    def _compute_metric(self, metric: torchmetrics.Metric, more: Iterable[str]) -> tuple[float, dict[str, float]]:
        # Under DDP, compute() gathers from every process: all of them must call it, or none (a process whose shard
        # had no labelled target must still join the others).
        updated = self.trainer.strategy.reduce_boolean_decision(bool(metric.update_count), all=False)
        values = metric_values(self.metric_name, metric.compute()) if updated else \
            (float("nan"), dict.fromkeys(more, float("nan")))
        metric.reset()
        return values

    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._update_metric(self.val_metric if dataloader_idx == 0 else self.test_metric, batch)

    def on_validation_epoch_end(self) -> None:
        val, val_more = metric_values(self.metric_name, self.val_metric.compute())
        self.val_metric.reset()
        test, test_more = self._compute_metric(self.test_metric, val_more)
        if self.trainer.sanity_checking:
            return
        train_loss = float(self.train_loss.compute()) if self.train_loss.update_count else float("nan")
        self.train_loss.reset()
        row = {"epoch": self.current_epoch, "train_loss": train_loss, "val": val, "test": test,
               "lr": float(self.optimizers().param_groups[0]["lr"]) if self.trainer.optimizers else float("nan"),
               "time": time.perf_counter() - self._epoch_start if self._epoch_start else 0.0,
               # further values of a metric that computes several (PCQM-Contact: Hits@k, filtered MRR)
               **{f"val_{k}": v for k, v in val_more.items()}, **{f"test_{k}": v for k, v in test_more.items()}}
        self.history.append(row)
        # the values are already the same in every process (torchmetrics gathered them): max keeps them exact
        self.log_dict({"val/metric": val, "test/metric": test}, prog_bar=True, sync_dist=True, reduce_fx="max")

    # Lightning's test stage is not the test split (validated every epoch, above): it evaluates the training split
    # once after training, with the selected checkpoint (trainer.eval_train; gea_graph.train.run.evaluate_train).
    def on_test_epoch_start(self) -> None:
        self.train_result = None

    def test_step(self, batch, batch_idx: int) -> None:
        self._update_metric(self.train_metric, batch)

    def on_test_epoch_end(self) -> None:
        self.train_result = self._compute_metric(self.train_metric, ())

    def best(self) -> dict[str, float] | None:
        r"""The history row with the best validation metric (first on ties), or ``None`` before any epoch."""
        rows = [r for r in self.history if not math.isnan(r["val"])]
        if not rows:
            return None
        sign = -1.0 if self.higher_is_better else 1.0
        return min(rows, key=lambda r: (sign * r["val"], r["epoch"]))

    # -- state ----------------------------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["gea_history"] = [dict(r) for r in self.history]
        checkpoint[RECORD_KEY] = checkpoint_record(self.recipe)  # versions, featuriser, targets (train.checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.history = [dict(r) for r in checkpoint.get("gea_history", [])]

    # -- optimisation ---------------------------------------------------------------------------------------------
    def _time_fraction(self) -> float:
        r"""The share of the run's budget used so far: of the wall-clock cap, or of ``trainer.max_epochs`` when that
        ends the run first (so the cosine always reaches 0 at the end of the run)."""
        timer = time_cap(self.trainer)
        if timer is None:
            raise ValueError("optim.horizon: time needs a wall-clock cap (trainer.max_time or --max-time)")
        elapsed = timer.time_elapsed("train")
        by_time = elapsed / max(elapsed + (timer.time_remaining("train") or 0.0), 1e-9)
        total = float(self.trainer.estimated_stepping_batches)  # inf when the epochs are unbounded
        by_steps = self.trainer.global_step / total if math.isfinite(total) and total > 0 else 0.0
        return max(by_time, by_steps)

    def configure_optimizers(self) -> dict[str, Any]:
        opt: OptimConfig = self.recipe.optim
        # fused and capturable on CUDA (the step never reads the device's counters on the host)
        optimizer = build_optimizer(self.parameters(), opt, fused=self.device.type == "cuda")
        if opt.schedule == "constant":
            return {"optimizer": optimizer}
        if opt.schedule == "plateau":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="max" if self.higher_is_better else "min", factor=opt.factor,
                patience=opt.patience, min_lr=opt.min_lr)
            # Stepped after each epoch's validation on its metric; not strict: a time cap may end an epoch before
            # its validation, and that epoch then leaves the rate as it is.
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "interval": "epoch",
                                                             "monitor": "val/metric", "strict": False}}
        if opt.schedule == "cosine" and opt.horizon == "time":
            factor = cosine_over_time(self._time_fraction)
            interval = "step"
        elif opt.schedule == "cosine":
            factor = cosine_with_warmup(opt.warmup_epochs, self.recipe.trainer.max_epochs)
            interval = "epoch"
        else:
            total = int(self.trainer.estimated_stepping_batches)
            factor = polynomial_with_warmup(opt.warmup_steps, total, opt.lr, opt.end_lr, opt.power)
            interval = "step"
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": interval}}
