r"""Whole networks assembled from :mod:`gea_graph.nn` by a typed config.

>>> from gea_graph.models import ModelConfig, build_model
>>> model = build_model(ModelConfig(family="geaet", task="graph_regression", out_channels=1,
...                                 hidden=64, layers=4))                      # doctest: +SKIP
"""
from gea_graph.models.config import FAMILIES, TASKS, GraphormerConfig, ModelConfig, PEConfig
from gea_graph.models.introspect import find_layers
from gea_graph.models.networks import (
                                       GEAETModel,
                                       GraphModel,
                                       GraphormerModel,
                                       MPNNModel,
                                       build_model,
                                       count_parameters,
)
from gea_graph.models.pyg_peers import PyGGINE, PyGGPS

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
