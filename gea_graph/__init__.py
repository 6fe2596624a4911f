"""gea-graph: graph transformers as PyTorch Geometric modules.

Sub-packages (dependencies point one way, top to bottom):

* :mod:`gea_graph.nn` -- the layers (torch + PyG only).
* :mod:`gea_graph.transforms` -- positional encodings and shortest paths as PyG transforms.
* :mod:`gea_graph.data` -- the benchmark datasets (download / mirror / MD5 / atomic caches).
* :mod:`gea_graph.models` -- whole networks built from :mod:`gea_graph.nn` by a typed config.
* :mod:`gea_graph.train` -- Lightning training, metrics, schedules.
* :mod:`gea_graph.bench`, :mod:`gea_graph.viz`, :mod:`gea_graph.diagnostics` -- benchmark runner, pictures, analyses.
* :mod:`gea_graph.cli` -- the ``gea-graph`` command.
"""

__version__ = "0.1.0"
