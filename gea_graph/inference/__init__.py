r"""Using a trained model: load a checkpoint, featurise inputs exactly as in training, predict, embed, evaluate
and export.

>>> import gea_graph
>>> trained = gea_graph.load_model("runs/quick/checkpoints/best.ckpt")     # doctest: +SKIP
>>> trained.predict(["CCO", "c1ccccc1O"]).values                           # doctest: +SKIP

* :func:`load_model`: the one way to load a trained model, through :mod:`gea_graph.train.checkpoint` (the one
  module that writes and reads checkpoints: weights only, on any device, its digest, record and sizes checked).
* :mod:`gea_graph.inference.model`: :class:`TrainedModel` (``.model``, ``.recipe``, ``.task``, ``.target_names``,
  ``.predict``, ``.embed``).
* :mod:`gea_graph.inference.inputs`: the inputs a model takes (SMILES, PyG graphs, a dataset's split), in chunks.
* :mod:`gea_graph.inference.predict`: ``gea-graph predict``: streamed predictions of one model or an ensemble to a
  CSV (and embeddings to ``.npy``), OGB's PCQM4Mv2 submission file.
* :mod:`gea_graph.inference.evaluate`: ``gea-graph evaluate``: the recipe's metric with the official evaluators.
* :mod:`gea_graph.inference.export`: ``gea-graph export``: a ``torch.export`` program that runs without gea-graph.

This room sits above :mod:`gea_graph.train`, :mod:`gea_graph.models` and :mod:`gea_graph.data` and below
:mod:`gea_graph.viz`, :mod:`gea_graph.diagnostics` and :mod:`gea_graph.cli`, which build on it.
"""
from __future__ import annotations

import os
from typing import Any

from gea_graph.inference.model import Predictions, TrainedModel
from gea_graph.train.checkpoint import convert_checkpoint, read_model


def load_model(path: str | os.PathLike, map_location: Any = "cpu") -> TrainedModel:
    r"""The trained model of a ``gea-graph train`` checkpoint (``RUN/checkpoints/best.ckpt``), in eval mode on
    :obj:`map_location` (default ``"cpu"``: a checkpoint saved on a GPU loads without one).

    Read with ``torch.load(..., weights_only=True)``; the digest of its weights, its record (versions, featuriser,
    target names, PE spec) and its recorded sizes are checked before the model is built
    (:mod:`gea_graph.train.checkpoint`).

    Raises:
        gea_graph.train.CheckpointError: one line naming the file, for a missing, corrupt, foreign, too new or
            inconsistent file.
    """
    loaded = read_model(path, map_location)
    return TrainedModel(loaded.model, loaded.recipe, loaded.featurizer, loaded.target_names, loaded.record,
                        str(path))


__all__ = ["Predictions", "TrainedModel", "convert_checkpoint", "load_model"]
