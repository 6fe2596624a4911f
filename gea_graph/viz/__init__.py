"""Molecule attention pictures: atoms coloured by a model's attention scores, drawn with RDKit.

>>> trained = gea_graph.load_model("runs/quick/checkpoints/best.ckpt")           # doctest: +SKIP
>>> graphs = trained.dataset_graphs("zinc", "test", [0, 5])                      # doctest: +SKIP
>>> pic, records = attention_picture(trained.model, graphs, kind="both")         # doctest: +SKIP
>>> pic.save("attention.png"); records[0].scores                                 # doctest: +SKIP

* :mod:`gea_graph.viz.pictures`: the model-level API (:func:`attention_picture`, :func:`atom_attention`).
* :mod:`gea_graph.viz.capture`: reading attention maps out of a model's layers.
* :mod:`gea_graph.viz.scores`: reducing external-attention (GEA) and self-attention maps to one score per atom.
* :mod:`gea_graph.viz.draw`: drawing molecules with per-atom scores (grid, colour bars, caption; PNG or SVG).
"""

from gea_graph.viz.capture import KINDS, capture_attention
from gea_graph.viz.draw import ColourScale, MolPicture, Panel, draw_molecule, draw_panels, to_mol
from gea_graph.viz.pictures import AtomAttention, atom_attention, attention_picture
from gea_graph.viz.scores import (
    EXTERNAL_REDUCTIONS,
    describe_reduction,
    reduce_external,
    reduce_self,
)

__all__ = [
    "EXTERNAL_REDUCTIONS",
    "KINDS",
    "AtomAttention",
    "ColourScale",
    "MolPicture",
    "Panel",
    "atom_attention",
    "attention_picture",
    "capture_attention",
    "describe_reduction",
    "draw_molecule",
    "draw_panels",
    "reduce_external",
    "reduce_self",
    "to_mol",
]
