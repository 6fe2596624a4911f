r"""What a training checkpoint records besides the weights, so that the model can be used without its run folder.

Every checkpoint written by ``gea-graph train`` holds, under the key ``"gea_graph"`` (plain types: it loads with
``torch.load(..., weights_only=True)``)::

    format          CHECKPOINT_FORMAT, the version of this record
    versions        gea-graph, torch, torch_geometric and rdkit that trained the model
    recipe_schema   RECIPE_SCHEMA_VERSION of gea_graph.train.recipe (the recipe itself is the hyper-parameters)
    task            the model's task
    featurizer      gea_graph.data.Featurizer.to_dict(): inputs, feature mode, vocabulary, PE spec
    targets         {"names": [...], "scaling": None}: the outputs' names (the training CSV's target columns or the
                    dataset card's) and the scaling applied to the targets in training (none: predictions are in
                    the targets' own units)

:mod:`gea_graph.inference` reads it back (and derives it from the recipe for checkpoints written before it existed).
"""
from __future__ import annotations

from typing import Any

import rdkit
import torch
import torch_geometric

import gea_graph
from gea_graph.data.featurizer import Featurizer, target_names
from gea_graph.train.recipe import RECIPE_SCHEMA_VERSION, Recipe

#: Version of the ``"gea_graph"`` record of a checkpoint.
CHECKPOINT_FORMAT = 1
#: The checkpoint key of the record.
RECORD_KEY = "gea_graph"


def installed_versions() -> dict[str, str]:
    r"""The versions of the libraries a trained model depends on, as plain strings (``torch.__version__`` is a
    ``TorchVersion``, which a weights-only load refuses)."""
    return {"gea-graph": str(gea_graph.__version__), "torch": str(torch.__version__),
            "torch_geometric": str(torch_geometric.__version__), "rdkit": str(rdkit.__version__)}


def featurizer_of(recipe: Recipe) -> Featurizer:
    r"""The featurisation of a recipe's data (:meth:`gea_graph.data.Featurizer.of_data`)."""
    data = recipe.data
    return Featurizer.of_data(data.name, data.csv, data.cls, data.options, data.pe)


def checkpoint_record(recipe: Recipe) -> dict[str, Any]:
    r"""The record a checkpoint of :obj:`recipe`'s model keeps (see the module docstring)."""
    data = recipe.data
    names = target_names(data.name, data.options if data.csv is not None else None, recipe.model.out_channels)
    return {"format": CHECKPOINT_FORMAT, "versions": installed_versions(), "recipe_schema": RECIPE_SCHEMA_VERSION,
            "task": recipe.model.task, "featurizer": featurizer_of(recipe).to_dict(),
            "targets": {"names": names, "scaling": None}}
