r"""``gea-graph evaluate``: a trained model's metric on a dataset's split, with the dataset's official evaluator
where one exists.

The metric is the recipe's (``trainer.metric``, by default the task's). Evaluators:

* PCQM4Mv2 / PCQM4M (MAE): OGB's own ``PCQM4Mv2Evaluator`` / ``PCQM4MEvaluator`` (``ogb.lsc``);
* Peptides-func and other multi-label tasks (AP): LRGB's average precision, the mean over the labels that have a
  positive and a negative labelled graph of scikit-learn's ``average_precision_score`` (LRGB's code takes OGB's
  ``eval_ap``; missing labels, NaN, are left out per label);
* Peptides-struct, ZINC and other regressions (MAE): the mean absolute error over the labelled targets (LRGB's MAE
  for Peptides-struct);
* PCQM-Contact (MRR): LRGB's ranking metrics, :class:`gea_graph.train.LinkRanking`: the raw MRR (the published
  one), Hits@1/3/10, and the filtered MRR and Hits@k of Tönshoff et al. (2023);
* accuracy and macro F1 (TreeNeighbourMatch, PascalVOC-SP, COCO-SP), which have no separate official evaluator:
  the torchmetrics objects training uses.

Several checkpoints are evaluated one by one and, for graph-level tasks, as an ensemble (the mean of their
outputs: values, or class and label probabilities).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gea_graph.data.config import PathLike
from gea_graph.inference.model import TrainedModel, common_featurizer
from gea_graph.train.metrics import (
    HIGHER_IS_BETTER,
    make_metric,
    metric_input,
    metric_values,
    prepare,
    resolve_task,
)
from gea_graph.train.module import labelled, target_count

#: The OGB evaluators of the OGB-LSC datasets, by dataset name.
OGB_EVALUATORS = {"pcqm4mv2": "PCQM4Mv2Evaluator", "pcqm4m": "PCQM4MEvaluator"}


@dataclass
class Score:
    r"""One evaluation: the metric's value, its other values (Hits@k ...) and which evaluator computed it."""

    value: float
    more: dict[str, float] = field(default_factory=dict)
    evaluator: str = ""


def lrgb_average_precision(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    r"""LRGB's multi-label average precision (OGB's ``eval_ap``): per label, scikit-learn's
    ``average_precision_score`` over the graphs labelled for it (NaN left out), for labels with both a positive and a
    negative; the mean over those labels.

    Raises:
        ValueError: when no label has both.
    """
    from sklearn.metrics import average_precision_score

    scores = []
    for task in range(y_true.shape[1]):
        known = ~np.isnan(y_true[:, task])
        truth = y_true[known, task]
        if (truth == 1).any() and (truth == 0).any():
            scores.append(average_precision_score(truth, y_pred[known, task]))
    if not scores:
        raise ValueError("no label has both a positive and a negative graph: average precision is undefined")
    return float(np.mean(scores))


def _mae(y_true: np.ndarray, y_pred: np.ndarray, dataset: str) -> Score:
    name = OGB_EVALUATORS.get(dataset)
    if name is not None:
        import ogb.lsc

        evaluator = getattr(ogb.lsc, name)()
        result = evaluator.eval({"y_pred": y_pred.reshape(-1).astype(np.float64),
                                 "y_true": y_true.reshape(-1).astype(np.float64)})
        return Score(float(result["mae"]), evaluator=f"ogb.lsc.{name}")
    known = ~np.isnan(y_true)
    return Score(float(np.abs(y_pred[known].astype(np.float64) - y_true[known]).mean()),
                 evaluator="mean absolute error over the labelled targets"
                 + (" (LRGB's MAE)" if dataset.startswith("peptides") else ""))


@torch.no_grad()
def _outputs(trained: TrainedModel, dataset: Any, batch_size: int | None) -> tuple[np.ndarray, np.ndarray]:
    r"""Raw outputs ``[G, T]`` and targets ``[G, T]`` of a graph-level model on a dataset, in order."""
    size = trained.batch_size(batch_size)
    outs, ys = [], []
    index = np.arange(len(dataset))
    for start in range(0, len(dataset), size):
        batch = _batch(dataset, index[start:start + size]).to(trained.device)
        pred, target = prepare(trained.model(batch), batch, trained.task)
        outs.append(pred.float().cpu())
        ys.append(target.reshape(pred.size(0), -1).float().cpu())
    return torch.cat(outs).numpy(), torch.cat(ys).numpy()


def _batch(dataset: Any, index: np.ndarray):
    if callable(getattr(dataset, "batch", None)):
        return dataset.batch(index)
    from torch_geometric.data import Batch

    return Batch.from_data_list([dataset[int(i)] for i in index])


@torch.no_grad()
def _streamed(trained: TrainedModel, dataset: Any, batch_size: int | None, metric: str) -> Score:
    r"""A metric updated batch by batch (per-node and per-pair tasks), as training's validation step does."""
    size = trained.batch_size(batch_size)
    scorer = make_metric(metric, trained.recipe.model)
    index = np.arange(len(dataset))
    for start in range(0, len(dataset), size):
        batch = _batch(dataset, index[start:start + size]).to(trained.device)
        pred, target = prepare(trained.model(batch), batch, trained.task)
        pred, target = labelled(pred, target, trained.task)
        if target_count(target) == 0:
            continue
        scorer.update(*metric_input(metric, pred, target))
    value, more = metric_values(metric, scorer.compute())
    evaluator = ("LRGB's link ranking (gea_graph.train.LinkRanking)" if metric == "mrr"
                 else f"torchmetrics ({type(scorer).__name__}, as in training)")
    return Score(value, more, evaluator)


def _score(metric: str, dataset: str, task: str, outputs: np.ndarray, targets: np.ndarray, model_cfg: Any) -> Score:
    r"""The metric of graph-level outputs (values, or class / label scores) against their targets."""
    if metric == "mae":
        return _mae(targets, outputs, dataset)
    if metric == "ap":
        return Score(lrgb_average_precision(targets, outputs),
                     evaluator="LRGB's average precision (OGB's eval_ap, scikit-learn)")
    scorer = make_metric(metric, model_cfg)
    pred, target = torch.from_numpy(outputs), torch.from_numpy(targets).reshape(-1).long()
    scorer.update(*metric_input(metric, pred, target))
    value, more = metric_values(metric, scorer.compute())
    return Score(value, more, f"torchmetrics ({type(scorer).__name__}, as in training)")


def _check_targets(trained: TrainedModel, dataset: str, metric: str) -> None:
    r"""Refuses, in one line, a dataset other than the model's own whose targets the model does not predict: another
    molecular dataset may be featurised as in training (so :meth:`Featurizer.load_dataset` takes it), yet a
    Peptides-func model's 10 labels cannot be scored against ZINC's one value."""
    from gea_graph.data import DATASETS

    card = DATASETS.get(dataset.lower())
    if card is None or dataset.lower() == trained.featurizer.dataset:
        return
    outputs = len(trained.target_names)
    # the card names its metric for people ("MAE", "AP"); regression against classification is what must agree
    if outputs != card.num_outputs or (metric == "mae") != (card.metric.lower() == "mae"):
        raise ValueError(f"the model ({trained.recipe.name}) predicts {outputs} output(s) scored by {metric}; "
                         f"{dataset} has {card.num_outputs} target(s) scored by {card.metric} ({card.task}): "
                         f"evaluate it on a dataset with its targets, or use gea-graph predict")


def evaluate(models: Sequence[TrainedModel], dataset: str, split: str, root: PathLike | None = None,
             batch_size: int | None = None) -> dict[str, Any]:
    r"""The recipe's metric of each model (and of their ensemble) on split :obj:`split` of the built-in dataset
    :obj:`dataset`, made with the models' featurisation in the data root :obj:`root` (default ``$GEA_GRAPH_DATA``,
    else ``./datasets``). Returns the JSON-ready result: ``dataset``, ``split``, ``graphs``, ``metric``,
    ``higher_is_better``, ``models`` (``checkpoint``, ``recipe``, ``value``, ``more``, ``evaluator``) and, for
    several graph-level models, ``ensemble``."""
    models = list(models)
    common_featurizer(models)
    metrics = {resolve_task(m.recipe.model, m.recipe.trainer.loss, m.recipe.trainer.metric)[1] for m in models}
    if len(metrics) > 1:
        raise ValueError(f"the models are scored by different metrics {sorted(metrics)}; evaluate them separately")
    metric = metrics.pop()
    for trained in models:
        _check_targets(trained, dataset, metric)
    data = models[0].featurizer.load_dataset(split, root, name=dataset)
    if len(data) == 0:
        raise ValueError(f"{dataset} {split} has no graphs to evaluate on")
    task = models[0].task
    graph_level = task.startswith("graph_")
    result: dict[str, Any] = {"dataset": dataset, "split": split, "graphs": len(data), "metric": metric,
                              "higher_is_better": HIGHER_IS_BETTER[metric], "models": []}
    outputs = []
    for trained in models:
        if graph_level:
            out, targets = _outputs(trained, data, batch_size)
            if np.isnan(targets).all():
                raise ValueError(f"{dataset} {split} has no labels (a hidden test split): nothing to evaluate; "
                                 f"use gea-graph predict for its predictions")
            score = _score(metric, dataset, task, out, targets, trained.recipe.model)
            outputs.append(trained._activation(torch.from_numpy(out)).numpy() if metric != "mae" else out)
        else:
            score = _streamed(trained, data, batch_size, metric)
        result["models"].append({"checkpoint": trained.path, "recipe": trained.recipe.name, "value": score.value,
                                 "more": score.more, "evaluator": score.evaluator})
    if graph_level and len(models) > 1:
        mean = np.mean(outputs, axis=0)
        score = _score(metric, dataset, task, mean, targets, models[0].recipe.model)
        result["ensemble"] = {"value": score.value, "more": score.more, "evaluator": score.evaluator,
                              "of": "the mean of the models' outputs" + ("" if metric == "mae" else
                                                                         " (probabilities)")}
    return result


def subset_notes(models: Sequence[TrainedModel], dataset: str, split: str) -> list[str]:
    r"""One note per model trained with ``data.subset`` whose own dataset is :obj:`dataset`: its ``result.json``
    holds the metric on the first ``data.subset`` graphs of each split, :func:`evaluate` the whole split's."""
    notes = []
    for trained in models:
        subset = trained.recipe.data.subset
        if subset is not None and dataset.lower() == trained.featurizer.dataset:
            notes.append(f"note: {trained.recipe.name} ({trained.path}) was trained and tested on a subset "
                         f"(data.subset={subset}); this is the whole {split} split, not the subset its result.json "
                         f"scored")
    return notes


def summary_lines(result: dict[str, Any]) -> list[str]:
    r"""One line per model (and the ensemble): ``<recipe> (<checkpoint>): <metric> <value>``."""
    def fmt(entry: dict[str, Any]) -> str:
        more = ", ".join(f"{k} {v:.4f}" for k, v in entry["more"].items() if not math.isnan(v))
        return f"{result['metric']} {entry['value']:.6g}" + (f" ({more})" if more else "")

    lines = [f"{m['recipe']} ({m['checkpoint']}): {result['dataset']} {result['split']} {fmt(m)}"
             for m in result["models"]]
    if "ensemble" in result:
        lines.append(f"ensemble of {len(result['models'])}: {result['dataset']} {result['split']} "
                     f"{fmt(result['ensemble'])}")
    return lines
