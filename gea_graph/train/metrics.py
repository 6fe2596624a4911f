r"""Losses and evaluation metrics by task (torchmetrics, so that they synchronise across DDP processes)."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torchmetrics
from torch import Tensor
from torchmetrics import Metric

from gea_graph.models import ModelConfig
from gea_graph.train.recipe import HIGHER_IS_BETTER, LOSSES

_AUTO_LOSS = {"graph_regression": "l1", "graph_classification": "ce", "graph_multilabel": "bce",
              "node_classification": "ce", "target_node": "ce", "link_ranking": "rank"}
_AUTO_METRIC = {"graph_regression": "mae", "graph_classification": "accuracy", "graph_multilabel": "ap",
                "node_classification": "f1", "target_node": "accuracy", "link_ranking": "mrr"}


class LinkTargets(NamedTuple):
    r"""What :func:`link_scores` ranks against: for each of the :math:`P` positive pairs ``(i, j)``, the candidate
    column of ``j`` (``index [P]`` long), the candidates that are true partners of ``i`` (``positives [P, N_max]``
    bool, ``j`` included) and the graph of the pair (``graph [P]`` long)."""

    index: Tensor
    positives: Tensor
    graph: Tensor


def link_scores(emb: Tensor, batch) -> tuple[Tensor, LinkTargets]:
    r"""Candidate scores for link ranking (PCQM-Contact): for every positive pair ``(i, j)`` of
    ``batch.edge_label_index`` (those with ``edge_label == 1`` when labels are given), the dot products of ``emb[i]``
    with every node of ``i``'s graph (``i`` itself included, as LRGB), and the :class:`LinkTargets` of the pairs.
    Returns ``(scores [P, N_max] with -inf padding, targets)``."""
    from torch_geometric.utils import to_dense_adj, to_dense_batch

    dense, mask = to_dense_batch(emb, batch.batch, batch_size=batch.num_graphs)  # [B, N, C]
    pairs = batch.edge_label_index
    label = getattr(batch, "edge_label", None)
    if label is not None:
        pairs = pairs[:, label.view(-1) > 0]
    src, dst = pairs
    graph = batch.batch[src]
    scores = torch.einsum("pc,pnc->pn", emb[src], dense[graph])
    scores = scores.masked_fill(~mask[graph], float("-inf"))
    partners = to_dense_adj(pairs, batch.batch, batch_size=batch.num_graphs, max_num_nodes=dense.size(1)) > 0
    positives = partners[graph, src - batch.ptr[graph]]  # [P, N]: the true partners of each pair's source
    return scores, LinkTargets(dst - batch.ptr[graph], positives, graph)


class LinkRanking(Metric):
    r"""Ranking metrics of inductive link prediction (PCQM-Contact, LRGB): Hits@1, Hits@3, Hits@10 and the mean
    reciprocal rank of the true partner :math:`j` of each positive pair :math:`(i, j)` among the nodes of the graph,
    scored by :math:`\mathbf{h}_i^\top \mathbf{h}_c`:

    .. math::
        \mathrm{rank}(i, j) = 1 + \big|\{c \in \mathcal{C}_{ij} : s_{ic} \ge s_{ij}\}\big|, \qquad
        \mathrm{MRR} = \frac{1}{|\mathcal{G}|} \sum_{G} \frac{1}{P_G} \sum_{(i, j) \in G}
        \frac{1}{\mathrm{rank}(i, j)}

    * **raw** (keys ``mrr``, ``hits@k``; what LRGB's code computes and the published tables report):
      :math:`\mathcal{C}_{ij}` = every node of the graph but :math:`j`, so the other true partners of :math:`i` (and
      :math:`i` itself) compete with :math:`j`;
    * **filtered** (keys ``mrr_filtered``, ``hits@k_filtered``; Tönshoff et al. 2023, "Where Did the Gap Go?"): the
      other true partners of :math:`i` are removed from :math:`\mathcal{C}_{ij}` (the usual filtered setting of
      knowledge-graph completion); :math:`i` itself stays a candidate, as in the ``_filtered`` values of LRGB's
      current code (its ``_filtered_noself`` variant, which also drops :math:`i`, is not computed here).

    Ties count against the true partner. As LRGB, each graph's pairs are averaged first, then the graphs (graphs
    without a positive pair are skipped). ``update(scores, targets)`` takes :func:`link_scores`' output; ``compute()``
    returns a dictionary of the eight values.
    """

    higher_is_better = True
    full_state_update = False
    KEYS = ("mrr", "hits@1", "hits@3", "hits@10", "mrr_filtered", "hits@1_filtered", "hits@3_filtered",
            "hits@10_filtered")

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.zeros(len(self.KEYS), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("graphs", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    @staticmethod
    def ranks(scores: Tensor, targets: LinkTargets) -> tuple[Tensor, Tensor]:
        r"""Raw and filtered ranks ``[P]`` of the true partners."""
        true = scores.gather(1, targets.index.view(-1, 1))
        beats = scores >= true  # the true partner itself included: rank = 1 + others
        raw = beats.sum(dim=1)
        filtered = 1 + (beats & ~targets.positives).sum(dim=1)
        return raw, filtered

    def update(self, scores: Tensor, targets: LinkTargets) -> None:
        if targets.index.numel() == 0:
            return
        raw, filtered = self.ranks(scores, targets)
        per_pair = []
        for rank in (raw, filtered):
            rank = rank.double()
            per_pair += [1.0 / rank, (rank <= 1).double(), (rank <= 3).double(), (rank <= 10).double()]
        values = torch.stack(per_pair, dim=1)  # [P, 8]
        graph, inverse = targets.graph.unique(return_inverse=True)
        sums = values.new_zeros(graph.numel(), values.size(1)).index_add_(0, inverse, values)
        pairs = torch.bincount(inverse, minlength=graph.numel()).double()
        self.total += (sums / pairs.unsqueeze(1)).sum(dim=0)
        self.graphs += graph.numel()

    def compute(self) -> dict[str, Tensor]:
        mean = (self.total / self.graphs.clamp(min=1)).float()
        return dict(zip(self.KEYS, mean.unbind()))


class WeightedMean(Metric):
    r""":math:`\sum_i w_i v_i / \sum_i w_i` over every update (tensors or numbers of any broadcastable shapes), in two
    float64 sums that stay on the device until :meth:`compute` (NaN when no weight was given).
    :class:`~torchmetrics.MeanMetric` with ``nan_strategy="disable"`` ignores the weights, and its other strategies
    look for NaN on the host at every update."""

    full_state_update = False
    higher_is_better = None

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("weight", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, value: Tensor, weight: Tensor | float = 1.0) -> None:
        value = torch.as_tensor(value, device=self.total.device)
        weight = torch.broadcast_to(torch.as_tensor(weight, device=self.total.device), value.shape)
        self.total += (value.double() * weight.double()).sum()
        self.weight += weight.double().sum()

    def compute(self) -> Tensor:
        return (self.total / self.weight).float()


def metric_values(name: str, value: Tensor | dict[str, Tensor]) -> tuple[float, dict[str, float]]:
    r"""The headline value of metric ``name`` and, for a metric that computes several (:class:`LinkRanking`), the
    others by key (``{}`` otherwise)."""
    if isinstance(value, dict):
        return float(value[name]), {key: float(v) for key, v in value.items() if key != name}
    return float(value), {}


def cross_entropy(logits: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
    r"""Cross-entropy of ``logits [M, C]`` against class indices ``target [M]``, the mean over rows (weighted by
    ``weight[target]`` when class weights are given), as :func:`torch.nn.functional.cross_entropy`:

    .. math::
        \mathcal{L} = -\frac{\sum_i w_{y_i} \log \mathrm{softmax}(\mathbf{z}_i)_{y_i}}{\sum_i w_{y_i}}

    written with a ``gather`` of the log-softmax instead of ``nll_loss``, whose CUDA kernel has no deterministic
    implementation: under ``torch.use_deterministic_algorithms(True)`` (``trainer.deterministic: true``) it raises,
    while a gather (and its backward, one entry per row) is deterministic. Scores of ``-inf`` (padded candidates of
    link ranking) are allowed."""
    picked = logits.log_softmax(dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    if weight is None:
        return -picked.mean()
    w = weight.gather(0, target)
    return -(w * picked).sum() / w.sum()


def class_balanced_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    r"""Cross-entropy with per-batch class weights :math:`w_c = (M - m_c) / M` for the classes present
    (:math:`m_c` targets of class :math:`c` among :math:`M`), 0 for absent ones: rare classes weigh more. This is the
    ``weighted_cross_entropy`` of the LRGB / GraphGPS / GEAET configs for PascalVOC-SP and COCO-SP, where the
    background class dominates."""
    counts = torch.bincount(target, minlength=logits.size(-1)).to(logits.dtype)
    weight = (target.numel() - counts) / max(target.numel(), 1) * (counts > 0)
    if not bool(weight.any()):  # a single class in the batch: every weight is 0, fall back to plain CE
        return cross_entropy(logits, target)
    return cross_entropy(logits, target, weight)


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
    r"""A fresh torchmetrics metric, updated with :func:`metric_input`'s values: ``mae`` and ``accuracy`` (micro) as
    a :class:`WeightedMean` of the absolute errors / hits weighted by the cells that count (the same
    values as :class:`~torchmetrics.MeanAbsoluteError` and micro :class:`~torchmetrics.Accuracy`, with missing
    targets and padding weighted 0 instead of indexed out: no host sync), ``ap`` (macro multi-label average
    precision, as LRGB), ``f1`` (macro, as LRGB's VOC/COCO), ``mrr`` (:class:`LinkRanking`: the raw MRR, with Hits@k
    and the filtered values beside it). Missing labels and padding rows reach ``ap`` and ``f1`` as
    ``ignore_index=-1``. Every state stays on the device until ``compute()``."""
    if name in ("mae", "accuracy"):
        return WeightedMean()
    if name == "ap":
        # ignore_index: missing (NaN) labels, passed as -1, are left out per label (OGB's rocauc/ap evaluators)
        return torchmetrics.AveragePrecision(task="multilabel", num_labels=cfg.out_channels, average="macro",
                                             ignore_index=-1, validate_args=False)
    if name == "f1":
        return torchmetrics.F1Score(task="multiclass", num_classes=cfg.out_channels, average="macro",
                                    ignore_index=-1, validate_args=False)
    return LinkRanking()


def valid_cells(target: Tensor, rows: Tensor | None = None) -> Tensor:
    r"""The target cells that count (bool, ``target``'s shape): labelled (not NaN) and, when ``rows [M]`` is given
    (a padded batch's graph or node mask), in a real row."""
    valid = ~torch.isnan(target) if target.is_floating_point() else torch.ones_like(target, dtype=torch.bool)
    if rows is not None:
        valid = valid & rows.view((-1,) + (1,) * (target.dim() - 1))
    return valid


def prepare(pred: Tensor, batch, task: str) -> tuple[Tensor, Tensor | LinkTargets]:
    r"""Predictions and targets in the shapes the loss and metric take (regression ``[B, T]`` float, classes
    ``[M, C]`` logits with ``[M]`` long targets, multi-label ``[B, T]`` logits with ``[B, T]`` long targets, link
    ranking ``[P, N_max]`` scores with :class:`LinkTargets`)."""
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
    if name == "rank":  # a softmax over the candidates
        return lambda p, t: cross_entropy(p, t.index)
    return cross_entropy


def metric_input(name: str, pred: Tensor, target: Tensor | LinkTargets,
                 rows: Tensor | None = None) -> tuple[Tensor, ...]:
    r"""The values a :func:`make_metric` metric is updated with, for predictions and targets as from
    :func:`prepare`: missing targets (and, with ``rows``, a padded batch's padding rows) weigh 0 or become the
    ``ignore_index`` (no boolean indexing, so no host sync). Float32 predictions; float64 for ``ap``, whose sums
    over thousands of ranked predictions were 1e-5 off OGB's float64 evaluator in float32."""
    if isinstance(target, LinkTargets):
        return pred.detach().float(), target
    valid = valid_cells(target, rows)
    pred = pred.detach()
    if name == "mae":
        error = (pred.float() - torch.where(valid, target, 0).to(torch.float32)).abs()
        return torch.where(valid, error, 0.0), valid.float()
    if name == "accuracy":
        hits = (pred.argmax(dim=-1) == target).float()
        return torch.where(valid, hits, 0.0), valid.float()
    target = torch.where(valid, target, -1).long()
    return (pred.double() if name == "ap" else pred.float()), target


def masked_loss(name: str, pred: Tensor, target: Tensor, rows: Tensor | None = None) -> Tensor:
    r"""The loss ``name`` (``l1``, ``mse``, ``bce``, ``ce``, ``wce``) as a masked mean over the target cells that
    count (:func:`valid_cells`: labelled, in a real row):

    .. math::
        \mathcal{L} = \frac{\sum_i m_i \, \ell_i}{\max(1, \sum_i m_i)}

    the value of :func:`loss_fn`'s loss on the labelled cells alone (0 where no cell counts), computed with
    ``torch.where`` instead of boolean indexing: no host sync, fixed shapes (a CUDA graph can hold it)."""
    valid = valid_cells(target, rows)
    safe = torch.where(valid, target, 0)
    if name == "l1":
        per = (pred - safe.to(pred.dtype)).abs()
    elif name == "mse":
        per = (pred - safe.to(pred.dtype)).square()
    elif name == "bce":
        per = F.binary_cross_entropy_with_logits(pred, safe.to(pred.dtype), reduction="none")
    elif name in ("ce", "wce"):
        per = -pred.log_softmax(dim=-1).gather(-1, safe.long().unsqueeze(-1)).squeeze(-1)
    else:
        raise ValueError(f"masked_loss: no masked form of the loss {name!r}")
    weight = valid.to(per.dtype)
    if name == "wce":  # the class weights of class_balanced_cross_entropy, over the cells that count
        counts = (F.one_hot(safe.long(), pred.size(-1)).to(per.dtype) * weight.unsqueeze(-1)).sum(0)
        total = weight.sum()
        classes = (total - counts) / total.clamp(min=1) * (counts > 0)
        weighted = weight * classes.gather(0, safe.long())
        weight = torch.where(classes.any(), weighted, weight)  # a single class: plain cross-entropy
    return torch.where(valid, per * weight, 0.0).sum() / weight.sum().clamp(min=torch.finfo(per.dtype).tiny)
