r"""Prediction rows of the performance suite: SMILES to predictions with a ZINC GEAET checkpoint, end to end
(featurisation, positional encodings, batching and the model), against the path a user would write with OGB and PyG.

* **Ours**: :meth:`gea_graph.inference.TrainedModel.predict` on a list of SMILES: the dataset build's featurisation
  (:func:`gea_graph.data.molecules.featurize_chunk`: RDKit, the features, batched RWPE), the chunk read through an
  in-memory store (:meth:`gea_graph.data.GraphStore.from_columns`), batches gathered column by column, the model.
* **Reference**: for each SMILES OGB's ``smiles2graph``, a PyG ``Data``, PyG's ``AddRandomWalkPE`` (as
  ``rw_pe``); then PyG's ``DataLoader`` and the same model (eval mode, no gradients).

The checkpoint is the ``geaet-zinc-quick`` recipe (GatedGCN + softmax attention + GEANet, 4 layers of 48, RWPE-16)
read by :func:`gea_graph.load_model`, with OGB's features (``features: ogb``, ``AtomEncoder`` / ``BondEncoder``), so
that OGB's ``smiles2graph`` feeds it the very inputs ours makes (the note gives the largest difference of the two
paths' predictions); its weights are freshly initialised (speed does not depend on them). Inputs: the ZINC test
molecules of the suite's ZINC build; the same batch size on both sides.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from gea_graph.bench.perf.core import Row, Settings, Target, time_pair
from gea_graph.bench.perf.data import build_zinc

#: The recipe and overrides of the checkpoint the rows predict with.
RECIPE = "geaet-zinc-quick"
OVERRIDES = ["data.options={features: ogb}", "model.node_encoder=atom", "model.edge_encoder=bond"]
#: Graphs per forward pass on both sides.
BATCH_SIZE = 256


def zinc_checkpoint(folder: Path):
    r"""The rows' checkpoint, written in the format of a training checkpoint into :obj:`folder` and loaded back."""
    from gea_graph.inference import load_model
    from gea_graph.train import GraphTask, load_recipe
    from gea_graph.train.checkpoint import RECORD_KEY, checkpoint_record, save_checkpoint

    recipe = load_recipe(RECIPE, OVERRIDES)
    torch.manual_seed(0)
    task = GraphTask(recipe.to_dict())
    path = folder / "geaet-zinc-ogb.ckpt"
    save_checkpoint({"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict(),
                     RECORD_KEY: checkpoint_record(recipe)}, path)
    return load_model(path)


def reference_predict(model: torch.nn.Module, smiles: list[str], walk_length: int, batch_size: int) -> np.ndarray:
    r"""The path a user would write: OGB's ``smiles2graph``, PyG ``Data`` + ``AddRandomWalkPE``, ``DataLoader``."""
    from ogb.utils import smiles2graph
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader
    from torch_geometric.transforms import AddRandomWalkPE

    walk = AddRandomWalkPE(walk_length, attr_name="rw_pe")
    graphs = []
    for text in smiles:
        g = smiles2graph(text)
        graphs.append(walk(Data(x=torch.from_numpy(g["node_feat"]), edge_index=torch.from_numpy(g["edge_index"]),
                                edge_attr=torch.from_numpy(g["edge_feat"]), num_nodes=int(g["num_nodes"]))))
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for batch in DataLoader(graphs, batch_size=batch_size):
            out.append(model(batch.to(device)))
    return torch.cat(out).cpu().numpy()


def predict_rows(settings: Settings) -> list[Row]:
    r"""Seconds per 1,000 molecules of ours and the reference (target: ratio ≤ 0.67, i.e. 1.5× faster), and ours
    in molecules per second (target ≥ 1,000 on the threads of the run; the documented figure uses one)."""
    count = 200 if settings.repeats <= 1 else 500 if settings.quick else 1000
    smiles = list(build_zinc().splits["test"].smiles)[:count]
    with tempfile.TemporaryDirectory() as folder:
        trained = zinc_checkpoint(Path(folder)).to(settings.device)
    walk = trained.recipe.model.pe.size

    def ours() -> np.ndarray:
        return trained.predict(smiles, batch_size=BATCH_SIZE).values

    def reference() -> np.ndarray:
        return reference_predict(trained.model, smiles, walk, BATCH_SIZE)

    gap = float(np.abs(ours() - reference()).max())
    t_ours, t_ref = time_pair(ours, reference, settings)
    per = 1000 / len(smiles)
    note = (f"{len(smiles)} ZINC test molecules, batch {BATCH_SIZE}, {torch.get_num_threads()} thread(s); "
            f"{RECIPE} with OGB features; largest difference of the two paths' predictions {gap:.2g}")
    return [Row("predict [ZINC GEAET checkpoint, SMILES to prediction]", t_ours * per, t_ref * per,
                "s/1000 mol", Target("<=", 0.67), note),
            Row("predict throughput [ZINC GEAET checkpoint, SMILES to prediction]", len(smiles) / t_ours,
                len(smiles) / t_ref, "mol/s", Target(">=", 1000.0, on="ours"), note)]
