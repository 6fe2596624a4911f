"""A trained model and the graphs to show it, for ``gea-graph viz`` and ``gea-graph diagnose``.

The model comes from a training checkpoint (read by :func:`gea_graph.train.load_checkpoint`, i.e.
``torch.load(..., weights_only=True)``); the graphs get the positional encodings of the checkpoint's recipe
(``data.pe``), so that they match what the model was trained on. Where the graphs are read from is the caller's
choice (``root``: a flag, ``$GEA_GRAPH_DATA`` or ``./datasets``), never the checkpoint's: a checkpoint from someone
else must not point the toolkit at files of its choosing.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence

import numpy as np
from torch import nn
from torch_geometric.data import Data

from gea_graph.data import DATASETS, get_dataset
from gea_graph.data.config import PathLike
from gea_graph.data.molecules import featurize
from gea_graph.train import CheckpointError, GraphTask, Recipe, load_checkpoint
from gea_graph.transforms import parse_pe
from gea_graph.viz.draw import to_mol


def load_trained(checkpoint: str | os.PathLike) -> tuple[nn.Module, Recipe]:
    """The network of a training checkpoint (``RUN/checkpoints/best.ckpt``) in eval mode, and its recipe.

    Raises:
        CheckpointError: if the file is missing, corrupt, or not a ``gea-graph train`` checkpoint.
    """
    ckpt = load_checkpoint(checkpoint)
    try:
        task = GraphTask(**ckpt["hyper_parameters"])
        task.load_state_dict(ckpt["state_dict"])
    except (KeyError, TypeError, RuntimeError) as err:
        raise CheckpointError(
            f"checkpoint {str(checkpoint)!r} is not a gea-graph training checkpoint ({type(err).__name__}: {err})"
        ) from None
    return task.model.eval(), task.recipe


def smiles_graphs(smiles: Sequence[str], recipe: Recipe) -> list[Data]:
    """Molecular graphs (OGB features, the recipe's positional encodings) of ``smiles``.

    Raises:
        ValueError: naming the first SMILES RDKit cannot parse.
    """
    for text in smiles:
        to_mol(text)
    graphs = featurize(list(smiles), np.zeros((len(smiles), 1)), "--smiles", features=training_features(recipe))
    _check_vocabulary(graphs, recipe)
    transform = parse_pe(recipe.data.pe)
    return [transform(g) if transform is not None else g for g in graphs]


def training_features(recipe: Recipe) -> str:
    """The featurisation the recipe's dataset used (ZINC: its own 28 atom types unless ``features: ogb``)."""
    options = dict(recipe.data.options)
    if recipe.data.name is not None and recipe.data.name.lower() in DATASETS:
        info = DATASETS[recipe.data.name.lower()]
        default = inspect.signature(info.cls.__init__).parameters.get("features")
        options = {**({"features": default.default} if default is not None else {}), **info.kwargs, **options}
    return str(options.get("features", "ogb"))


def _check_vocabulary(graphs: Sequence[Data], recipe: Recipe) -> None:
    # An embedding table indexed past its rows fails with torch's "index out of range in self", naming nothing.
    model = recipe.model
    if model.node_encoder != "embedding" or not model.node_vocab:
        return
    for graph in graphs:
        x = graph.x[:, : model.node_in]
        if x.numel() and int(x.max()) >= model.node_vocab:
            atom = int((x >= model.node_vocab).any(dim=1).nonzero()[0])
            raise ValueError(f"--smiles {graph.smiles!r}: atom {atom} has feature value {int(x[atom].max())}, "
                             f"outside the {model.node_vocab} values the model's atom embedding was trained on")


def dataset_graphs(
    name: str,
    recipe: Recipe,
    split: str = "test",
    indices: Sequence[int] | None = None,
    first: int | None = None,
    root: PathLike | None = None,
) -> list[Data]:
    """Graphs of split ``split`` of the built-in dataset ``name`` under the data root ``root`` (default
    ``$GEA_GRAPH_DATA``, else ``./datasets``; the recipe's ``data.root`` is ignored), with the recipe's positional
    encodings: those at ``indices``, else the first ``first``, else all.

    Raises:
        IndexError: for an index outside the split.
    """
    dataset = get_dataset(name, root=root, split=split, pe=recipe.data.pe)
    if indices is None:
        indices = range(len(dataset) if first is None else min(first, len(dataset)))
    bad = [i for i in indices if not -len(dataset) <= i < len(dataset)]
    if bad:
        raise IndexError(f"indices {bad} out of range: {name} {split} has {len(dataset)} graphs")
    return [dataset[i] for i in indices]
