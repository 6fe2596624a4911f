"""Oversmoothing diagnostics: per-layer cosine similarity and Dirichlet energy, GFSA frequency response.

* :mod:`gea_graph.diagnostics.measures`: the measures on node representations and the filter response.
* :mod:`gea_graph.diagnostics.collect`: per-layer node representations of any model with a ``layers`` stack.
"""

from gea_graph.diagnostics.collect import collect_node_states, find_layers, node_states
from gea_graph.diagnostics.measures import dirichlet_energy, gfsa_response, mean_cosine_similarity

__all__ = [
    "collect_node_states",
    "dirichlet_energy",
    "find_layers",
    "gfsa_response",
    "mean_cosine_similarity",
    "node_states",
]
