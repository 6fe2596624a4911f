"""Oversmoothing diagnostics: per-layer cosine similarity and Dirichlet energy, GFSA frequency response.

>>> trained = gea_graph.load_model("runs/gfsa/checkpoints/best.ckpt")            # doctest: +SKIP
>>> batch = Batch.from_data_list(trained.dataset_graphs("zinc", "test", first=64))  # doctest: +SKIP
>>> diagnose({"gfsa": trained.model}, [batch], Path("diag"))                     # doctest: +SKIP

* :mod:`gea_graph.diagnostics.measures`: the measures on node representations and the filter response.
* :mod:`gea_graph.diagnostics.collect`: per-layer node representations of any model with a ``layers`` stack, and
  the attention maps its modules compute (also read by :mod:`gea_graph.viz`).
* :mod:`gea_graph.diagnostics.report`: tables, CSV files and the plot (``gea-graph diagnose``).

A trained model and graphs made as its training graphs were come from :mod:`gea_graph.inference`.
"""

from gea_graph.diagnostics.collect import collect_attention, collect_node_states, node_states
from gea_graph.diagnostics.measures import dirichlet_energy, gfsa_response, mean_cosine_similarity
from gea_graph.diagnostics.report import (
    diagnose,
    gfsa_coefficients,
    gfsa_eigenvalues,
    layer_table,
    plot_report,
    response_table,
)

__all__ = [
    "collect_attention",
    "collect_node_states",
    "diagnose",
    "dirichlet_energy",
    "gfsa_coefficients",
    "gfsa_eigenvalues",
    "gfsa_response",
    "layer_table",
    "mean_cosine_similarity",
    "node_states",
    "plot_report",
    "response_table",
]
