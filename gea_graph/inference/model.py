r"""A trained model with its recipe and featurisation: predictions and embeddings of new inputs.

>>> import gea_graph
>>> trained = gea_graph.load_model("runs/quick/checkpoints/best.ckpt")          # doctest: +SKIP
>>> trained.predict(["CCO", "c1ccccc1O"]).values                                 # doctest: +SKIP
>>> trained.predict("zinc", split="test").values                                  # doctest: +SKIP
>>> trained.embed(["CCO"])                                                        # doctest: +SKIP

Outputs come back in input order, one row per input: regression values, class or label probabilities (softmax for
classes, sigmoid for multi-label; ``logits=True`` gives the raw outputs). An input that cannot be featurised (RDKit
cannot parse it, an atom outside the model's vocabulary) keeps its row, filled with NaN, and its reason is in
:attr:`Predictions.errors`.

Batch independence: with the per-graph GEA softmax (``norm_scope: graph``, our default) and normalisations in eval
mode, a graph's prediction does not depend on the other graphs of its batch, so the batch size and the order of the
inputs change nothing (tested to 1e-5). A model trained with the authors' batch-wide softmax (``norm_scope:
batch``) depends on its batch-mates: for such a model the batch size is the recipe's evaluation batch size whatever
is asked (with one warning), so that predictions are made as the model was evaluated in training.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from gea_graph.data.config import PathLike
from gea_graph.data.featurizer import Featurized, Featurizer
from gea_graph.inference.inputs import InputChunk, graph_chunks, is_smiles_list, smiles_chunks
from gea_graph.train.recipe import Recipe

#: Tasks with one prediction per graph (what ``predict`` writes, one row per input).
GRAPH_LEVEL_TASKS = ("graph_regression", "graph_classification", "graph_multilabel", "target_node")


@dataclass
class Predictions:
    r"""One row per input, in input order.

    Attributes:
        values: ``[N, T]`` float: regression values, class or label probabilities (or logits); NaN rows for invalid
            inputs. ``numpy.asarray(predictions)`` gives it.
        errors: ``[N]``: ``None`` for a predicted input, else why it could not be featurised.
        target_names: The ``T`` output names (the training CSV's target columns or the dataset card's).
        smiles: ``[N]``: the SMILES of each input (given, or the graph's ``smiles`` field), ``None`` where unknown.
    """

    values: np.ndarray
    errors: list[str | None]
    target_names: list[str]
    smiles: list[str | None]

    def __len__(self) -> int:
        return len(self.errors)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return self.values if dtype is None else self.values.astype(dtype)

    @property
    def valid(self) -> np.ndarray:
        r"""``[N]`` bool: True where the input was predicted."""
        return np.array([e is None for e in self.errors], dtype=bool)


class TrainedModel:
    r"""A trained network, its recipe, task, output names and featurisation (load one with
    :func:`gea_graph.load_model`).

    Attributes:
        model: The network (:class:`torch.nn.Module`) in eval mode.
        recipe: Its :class:`~gea_graph.train.Recipe`.
        task: Its task (``graph_regression``, ``graph_multilabel``, ...).
        target_names: The names of its outputs.
        featurizer: How its inputs are made (:class:`~gea_graph.data.Featurizer`).
        record: The checkpoint's record (versions that trained it, featuriser, targets).
        path: The checkpoint it was read from.
    """

    def __init__(self, model: nn.Module, recipe: Recipe, featurizer: Featurizer, target_names: list[str],
                 record: dict[str, Any], path: str = "") -> None:
        self.model = model.eval()
        self.recipe = recipe
        self.task = recipe.model.task
        self.target_names = list(target_names)
        self.featurizer = featurizer
        self.record = record
        self.path = path
        self._warned = False

    # -- properties -------------------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> TrainedModel:
        r"""Moves the network to :obj:`device`; returns ``self``."""
        self.model.to(device)
        return self

    @property
    def batch_dependent(self) -> bool:
        r"""Whether a graph's output depends on its batch-mates (GEA with the authors' ``norm_scope: batch``)."""
        return any(getattr(m, "norm_scope", None) == "batch" for m in self.model.modules())

    @property
    def eval_batch_size(self) -> int:
        r"""The recipe's evaluation batch size (``trainer.eval_batch_size``, else ``trainer.batch_size``)."""
        trainer = self.recipe.trainer
        return trainer.eval_batch_size or trainer.batch_size

    def batch_size(self, asked: int | None = None) -> int:
        r"""The batch size to predict with: :obj:`asked` (default: the recipe's evaluation batch size), except for a
        batch-dependent model, which always uses the recipe's evaluation batch size (warning once when asked for
        another)."""
        if not self.batch_dependent:
            return asked or self.eval_batch_size
        if asked not in (None, self.eval_batch_size) and not self._warned:
            self._warned = True
            warnings.warn(f"{self.path or 'this model'} normalises GEA over the whole batch (norm_scope: batch), so "
                          f"its predictions depend on the batch: predicting with the recipe's evaluation batch size "
                          f"{self.eval_batch_size}, not {asked}", stacklevel=3)
        return self.eval_batch_size

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.recipe.name or self.path}, task={self.task}, "
                f"targets={self.target_names[:4]}{'...' if len(self.target_names) > 4 else ''}, "
                f"inputs={self.featurizer.inputs} {self.featurizer.features or ''} pe={self.featurizer.pe})")

    # -- inputs -----------------------------------------------------------------------------------------------------
    def chunks(self, inputs: Any, split: str | None = None, root: PathLike | None = None,
               size: int | None = None) -> Iterator[InputChunk]:
        r"""The chunks of :obj:`inputs` (see :meth:`predict`), featurised for this model."""
        if split is not None:
            if not isinstance(inputs, str):
                raise TypeError(f"split={split!r} needs a dataset name as inputs, got {type(inputs).__name__}")
            return graph_chunks(self.featurizer.load_dataset(split, root, name=inputs), size)
        if isinstance(inputs, str):
            raise TypeError(f"inputs {inputs!r}: a single string is ambiguous; give SMILES as a list "
                            f"([{inputs!r}]) or a dataset name with split=..., e.g. predict('zinc', split='test')")
        if is_smiles_list(inputs):
            return smiles_chunks(inputs, self.featurizer, size)
        return graph_chunks(inputs, size)

    def graphs(self, smiles: Sequence[str]) -> list:
        r"""The graphs of :obj:`smiles` as the model was trained on them (featurisation and PEs), as ``Data``.

        Raises:
            ValueError: naming the first input that cannot be featurised and why.
        """
        out = self.featurizer.featurize(list(smiles))
        if out.errors:
            row = min(out.errors)
            raise ValueError(f"SMILES {smiles[row]!r} (input {row}): {out.errors[row]}")
        batch = out.batch(np.arange(len(out.rows)))
        return batch.to_data_list()

    def dataset_graphs(self, name: str, split: str = "test", indices: Sequence[int] | None = None,
                       first: int | None = None, root: PathLike | None = None) -> list:
        r"""Graphs of split :obj:`split` of the built-in dataset :obj:`name`, made as the model's training graphs
        were (its feature mode and PE spec), from the data root :obj:`root` (default ``$GEA_GRAPH_DATA``, else
        ``./datasets``; never a path from the checkpoint): those at :obj:`indices`, else the first :obj:`first`,
        else all.

        Raises:
            IndexError: for an index outside the split.
        """
        dataset = self.featurizer.load_dataset(split, root, name=name)
        if indices is None:
            indices = range(len(dataset) if first is None else min(first, len(dataset)))
        bad = [i for i in indices if not -len(dataset) <= i < len(dataset)]
        if bad:
            raise IndexError(f"indices {bad} out of range: {name} {split} has {len(dataset)} graphs")
        return [dataset[i] for i in indices]

    # -- running ----------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, graphs: Featurized, batch_size: int | None = None, logits: bool = False,
            embeddings: bool = False, on_batch: Callable[[Any, np.ndarray], None] | None = None
            ) -> tuple[Tensor, Tensor | None]:
        r"""Outputs ``[G, T]`` (and with :obj:`embeddings` the head's inputs ``[G, d]``) of the valid graphs of a
        chunk, in order. :obj:`on_batch` sees every batch and the positions of its graphs (e.g. to read their
        ``smiles``)."""
        if self.task not in GRAPH_LEVEL_TASKS and not embeddings:
            raise ValueError(f"this model's task {self.task} has no prediction per graph (one per node or node "
                             f"pair): use .embed(...), or run .model on batches")
        size = self.batch_size(batch_size)
        device = self.device
        outs, embs = [], []
        seen: list[Tensor] = []
        hook = self.model.head.register_forward_pre_hook(lambda _m, args: seen.append(args[0])) \
            if embeddings else None
        count = len(graphs.rows)
        # Graphs of similar size batched together (less padding in dense attention) where the batch does not matter
        # to the outputs; a batch-dependent model sees the inputs in their order, as it was evaluated.
        sizes = None if self.batch_dependent else graphs.num_nodes()
        order = np.argsort(sizes, kind="stable") if sizes is not None else np.arange(count)
        try:
            for start in range(0, count, size):
                batch = graphs.batch(order[start:start + size])
                if on_batch is not None:
                    on_batch(batch, order[start:start + size])
                batch = batch.to(device)
                seen.clear()
                out = self.model(batch)
                if embeddings:
                    embs.append(self._graph_embedding(seen[-1], batch).float().cpu())
                if self.task in GRAPH_LEVEL_TASKS:
                    outs.append((out if logits else self._activation(out)).float().cpu())
        finally:
            if hook is not None:
                hook.remove()
        width = len(self.target_names)
        inverse = torch.from_numpy(np.argsort(order, kind="stable"))
        values = torch.cat(outs)[inverse] if outs else torch.zeros(0, width)
        return values, (torch.cat(embs)[inverse] if embs else None)

    def _activation(self, out: Tensor) -> Tensor:
        if self.task in ("graph_classification", "target_node"):
            return out.softmax(dim=-1)
        if self.task == "graph_multilabel":
            return out.sigmoid()
        return out

    def _graph_embedding(self, head_input: Tensor, batch: Any) -> Tensor:
        # Graph tasks: the pooled representation the head reads; node-level tasks: the mean of the nodes' ones.
        if head_input.size(0) == batch.num_graphs and self.task in GRAPH_LEVEL_TASKS:
            return head_input
        return scatter(head_input, batch.batch, dim=0, dim_size=batch.num_graphs, reduce="mean")

    def _collect(self, inputs: Any, batch_size: int | None, split: str | None, root: PathLike | None,
                 logits: bool, embeddings: bool) -> tuple[np.ndarray, np.ndarray | None, list[str | None],
                                                          list[str | None]]:
        values, embs, errors, smiles = [], [], [], []
        for chunk in self.chunks(inputs, split, root):
            texts: dict[int, str | None] = {}
            out, emb = self.run(chunk.graphs, batch_size, logits, embeddings,
                                on_batch=None if chunk.smiles is not None else partial(read_smiles, texts))
            rows = chunk.graphs.rows
            if self.task in GRAPH_LEVEL_TASKS:
                block = np.full((chunk.size, len(self.target_names)), np.nan, dtype=np.float32)
                block[rows] = out.numpy()
                values.append(block)
            if emb is not None:
                block = np.full((chunk.size, emb.size(1)), np.nan, dtype=np.float32)
                block[rows] = emb.numpy()
                embs.append(block)
            errors += [chunk.graphs.errors.get(i) for i in range(chunk.size)]
            smiles += list(chunk.smiles) if chunk.smiles is not None else [texts.get(i) for i in range(chunk.size)]
        width = len(self.target_names)
        return (np.concatenate(values) if values else np.zeros((0, width), np.float32),
                np.concatenate(embs) if embs else None, errors, smiles)

    def predict(self, inputs: Any, batch_size: int | None = None, *, split: str | None = None,
                root: PathLike | None = None, logits: bool = False) -> Predictions:
        r"""Predictions for :obj:`inputs`, in input order (see the module docstring).

        Args:
            inputs: A list of SMILES; a PyG ``Data``, ``Batch``, list of ``Data`` or ``Dataset`` holding the
                fields the model was trained on; or a built-in dataset's name with :obj:`split` (built with the
                model's featurisation in the data root :obj:`root`, default ``$GEA_GRAPH_DATA``).
            batch_size: Graphs per forward pass (default: the recipe's evaluation batch size; batch-dependent
                models always use that one).
            split, root: See :obj:`inputs`.
            logits: Raw outputs instead of probabilities (classification and multi-label).
        """
        values, _, errors, smiles = self._collect(inputs, batch_size, split, root, logits, embeddings=False)
        return Predictions(values, errors, list(self.target_names), smiles)

    def embed(self, inputs: Any, batch_size: int | None = None, *, split: str | None = None,
              root: PathLike | None = None) -> np.ndarray:
        r"""Each input's graph representation ``[N, d]`` float32, taken where the prediction head reads it (after
        pooling; for node-level tasks the mean of the final node representations), in input order; NaN rows for
        inputs that cannot be featurised. Inputs as in :meth:`predict`."""
        _, embs, errors, _ = self._collect(inputs, batch_size, split, root, logits=False, embeddings=True)
        if embs is None:
            return np.zeros((len(errors), 0), np.float32)
        return embs


def read_smiles(into: dict[int, str | None], batch: Any, positions: np.ndarray) -> None:
    r"""Records the ``smiles`` of a batch's graphs at their positions in :obj:`into` (``None`` for graphs without
    one)."""
    into.update(zip(positions.tolist(), getattr(batch, "smiles", None) or [None] * batch.num_graphs))


def common_featurizer(models: Iterable[TrainedModel]) -> Featurizer:
    r"""The featurisation shared by an ensemble's models (a :class:`ValueError` naming two that differ)."""
    models = list(models)
    first = models[0]
    for other in models[1:]:
        if other.featurizer != first.featurizer:
            raise ValueError(f"the models featurise differently ({first.path}: {first.featurizer}; {other.path}: "
                             f"{other.featurizer}); an ensemble needs one featurisation")
        if other.target_names != first.target_names or other.task != first.task:
            raise ValueError(f"the models predict different things ({first.path}: {first.task} "
                             f"{first.target_names}; {other.path}: {other.task} {other.target_names})")
    return first.featurizer
