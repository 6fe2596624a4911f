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

from __future__ import annotations

import importlib
from typing import Any

# Names load on first use (PEP 562): RDKit's drawing module needs X11 client libraries (libXrender) that headless
# machines may lack, so importing this package, or ``gea_graph.viz.scores`` through it, must not pull it in.
_MODULE_OF = {
    "KINDS": "capture", "capture_attention": "capture",
    "ColourScale": "draw", "MolPicture": "draw", "Panel": "draw", "draw_molecule": "draw", "draw_panels": "draw",
    "to_mol": "draw",
    "AtomAttention": "pictures", "atom_attention": "pictures", "attention_picture": "pictures",
    "EXTERNAL_REDUCTIONS": "scores", "describe_reduction": "scores", "reduce_external": "scores",
    "reduce_self": "scores",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)


__all__ = list(_MODULE_OF)
