r"""Losses and evaluation metrics by task (torchmetrics, so that they synchronise across DDP processes)."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
import torchmetrics
from torch import Tensor
from torchmetrics import Metric

from gea_graph.models import ModelConfig

#: metric name -> True when higher is better
HIGHER_IS_BETTER = {"mae": False, "accuracy": True, "ap": True, "f1": True, "mrr": True}

_AUTO_LOSS = {"graph_regression": "l1", "graph_classification": "ce", "graph_multilabel": "bce",
              "node_classification": "ce", "target_node": "ce", "link_ranking": "rank"}
_AUTO_METRIC = {"graph_regression": "mae", "graph_classification": "accuracy", "graph_multilabel": "ap",
                "node_classification": "f1", "target_node": "accuracy", "link_ranking": "mrr"}


def link_scores(emb: Tensor, batch) -> tuple[Tensor, Tensor]:
    r"""Candidate scores for link ranking (PCQM-Contact): for every positive pair ``(i, j)`` of
    ``batch.edge_label_index`` (those with ``edge_label == 1`` when labels are given), the dot products of ``emb[i]``
    with every node of ``i``'s graph (raw ranking against all nodes), and the position of ``j`` among them.
    Returns ``(scores [P, N_max] with -inf padding, target [P] long)``."""
    from torch_geometric.utils import to_dense_batch

    dense, mask = to_dense_batch(emb, batch.batch, batch_size=batch.num_graphs)  # [B, N, C]
    pairs = batch.edge_label_index
    label = getattr(batch, "edge_label", None)
    if label is not None:
        pairs = pairs[:, label.view(-1) > 0]
    src, dst = pairs
    graph = batch.batch[src]
    scores = torch.einsum("pc,pnc->pn", emb[src], dense[graph])
    scores = scores.masked_fill(~mask[graph], float("-inf"))
    target = dst - batch.ptr[graph]
    return scores, target


class MeanReciprocalRank(Metric):
    r"""Mean reciprocal rank of the true candidate (ties count against it: rank = 1 + #scores >= true, minus 1)."""

    higher_is_better = True
    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, scores: Tensor, target: Tensor) -> None:
        true = scores.gather(1, target.view(-1, 1))
        rank = (scores >= true).sum(dim=1)
        self.total += (1.0 / rank.double()).sum()
        self.count += target.numel()

    def compute(self) -> Tensor:
        return (self.total / self.count.clamp(min=1)).float()


#: loss names a recipe may give as ``trainer.loss``
LOSSES = ("l1", "mse", "ce", "wce", "bce", "rank")


def class_balanced_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    r"""Cross-entropy with per-batch class weights :math:`w_c = (M - m_c) / M` for the classes present
    (:math:`m_c` targets of class :math:`c` among :math:`M`), 0 for absent ones: rare classes weigh more. This is the
    ``weighted_cross_entropy`` of the LRGB / GraphGPS / GEAET configs for PascalVOC-SP and COCO-SP, where the
    background class dominates."""
    counts = torch.bincount(target, minlength=logits.size(-1)).to(logits.dtype)
    weight = (target.numel() - counts) / max(target.numel(), 1) * (counts > 0)
    if not bool(weight.any()):  # a single class in the batch: every weight is 0, fall back to plain CE
        return F.cross_entropy(logits, target)
    return F.cross_entropy(logits, target, weight=weight)


def resolve_task(cfg: ModelConfig, loss: str = "auto", metric: str = "auto") -> tuple[str, str]:
    r"""The loss and metric names of a task (``auto`` picks the task's default)."""
    loss = _AUTO_LOSS[cfg.task] if loss == "auto" else loss
    metric = _AUTO_METRIC[cfg.task] if metric == "auto" else metric
    if metric not in HIGHER_IS_BETTER:
        raise ValueError(f"trainer.metric: {metric!r} is not one of auto, {', '.join(HIGHER_IS_BETTER)}")
    if loss not in LOSSES:
        raise ValueError(f"trainer.loss: {loss!r} is not one of auto, {', '.join(LOSSES)}")
    return loss, metric


def make_metric(name: str, cfg: ModelConfig) -> Metric:
    r"""A fresh torchmetrics metric: ``mae``, ``accuracy`` (micro), ``ap`` (macro multi-label average precision,
    as LRGB), ``f1`` (macro, as LRGB's VOC/COCO), ``mrr``."""
    if name == "mae":
        return torchmetrics.MeanAbsoluteError()
    if name == "accuracy":
        return torchmetrics.Accuracy(task="multiclass", num_classes=cfg.out_channels, average="micro")
    if name == "ap":
        # ignore_index: missing (NaN) labels, passed as -1, are left out per label (OGB's rocauc/ap evaluators)
        return torchmetrics.AveragePrecision(task="multilabel", num_labels=cfg.out_channels, average="macro",
                                             ignore_index=-1)
    if name == "f1":
        return torchmetrics.F1Score(task="multiclass", num_classes=cfg.out_channels, average="macro")
    return MeanReciprocalRank()


def prepare(pred: Tensor, batch, task: str) -> tuple[Tensor, Tensor]:
    r"""Predictions and targets in the shapes the loss and metric take (regression ``[B, T]`` float, classes
    ``[M, C]`` logits with ``[M]`` long targets, multi-label ``[B, T]`` logits with ``[B, T]`` long targets, link
    ranking ``[P, N_max]`` scores with ``[P]`` targets)."""
    if task == "link_ranking":
        return link_scores(pred, batch)
    y = batch.y
    if task == "graph_regression":
        return pred, y.view(pred.shape).to(pred.dtype)
    if task == "graph_multilabel":
        return pred, y.view(pred.shape)
    return pred, y.view(-1).long()


def loss_fn(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    r"""The loss by name (logits in, targets as from :func:`prepare`)."""
    if name == "l1":
        return F.l1_loss
    if name == "mse":
        return F.mse_loss
    if name == "bce":
        return lambda p, y: F.binary_cross_entropy_with_logits(p, y.to(p.dtype))
    if name == "wce":
        return class_balanced_cross_entropy
    return F.cross_entropy  # "ce" and "rank" (a softmax over the candidates)


def metric_input(name: str, pred: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    r"""Casts predictions/targets for the torchmetrics update (float32 predictions, long labels)."""
    pred = pred.detach().float()
    if name == "ap":
        return pred, target.long()
    return pred, target
