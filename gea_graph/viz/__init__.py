"""Molecule attention pictures: atoms coloured by attention scores, drawn with RDKit.

* :mod:`gea_graph.viz.draw`: draw molecules with per-atom scores (grid, colour bars, caption; PNG or SVG).
* :mod:`gea_graph.viz.scores`: reduce external-attention (GEA) and self-attention maps to one score per atom.
"""

from gea_graph.viz.draw import ColourScale, MolPicture, Panel, draw_molecule, draw_panels, to_mol
from gea_graph.viz.scores import (
    EXTERNAL_REDUCTIONS,
    describe_reduction,
    reduce_external,
    reduce_self,
)

__all__ = [
    "EXTERNAL_REDUCTIONS",
    "ColourScale",
    "MolPicture",
    "Panel",
    "describe_reduction",
    "draw_molecule",
    "draw_panels",
    "reduce_external",
    "reduce_self",
    "to_mol",
]
