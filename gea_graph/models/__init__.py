r"""Whole networks assembled from :mod:`gea_graph.nn` by a typed config.

>>> from gea_graph.models import ModelConfig, build_model
>>> model = build_model(ModelConfig(family="geaet", task="graph_regression", out_channels=1,
...                                 hidden=64, layers=4))                      # doctest: +SKIP

The configs import nothing heavy; the networks (and with them PyG) are imported when first used, so that reading a
recipe does not import PyG.
"""
from __future__ import annotations

from gea_graph.lazy import lazy_exports
from gea_graph.models.config import FAMILIES, TASKS, GraphormerConfig, ModelConfig, PEConfig

#: Public name -> the module of this package that defines it (imported on first use).
_WHERE = {
    "GEAETModel": "networks", "GraphModel": "networks", "GraphormerModel": "networks", "MPNNModel": "networks",
    "build_model": "networks", "count_parameters": "networks", "find_layers": "introspect",
    "PyGGINE": "pyg_peers", "PyGGPS": "pyg_peers",
}

__all__ = [
    "FAMILIES",
    "TASKS",
    "GEAETModel",
    "GraphModel",
    "GraphormerConfig",
    "GraphormerModel",
    "MPNNModel",
    "ModelConfig",
    "PEConfig",
    "PyGGINE",
    "PyGGPS",
    "build_model",
    "count_parameters",
    "find_layers",
]


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())
