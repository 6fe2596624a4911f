"""gea-graph: graph transformers as PyTorch Geometric modules.

Sub-packages (dependencies point one way, top to bottom):

* :mod:`gea_graph.nn` -- the layers (torch + PyG only).
* :mod:`gea_graph.transforms` -- positional encodings and shortest paths as PyG transforms.
* :mod:`gea_graph.data` -- the benchmark datasets (download / mirror / MD5 / atomic caches).
* :mod:`gea_graph.models` -- whole networks built from :mod:`gea_graph.nn` by a typed config.
* :mod:`gea_graph.train` -- Lightning training, metrics, schedules.
* :mod:`gea_graph.inference` -- a trained model from a checkpoint: predict, embed, evaluate, export
  (:func:`gea_graph.load_model`).
* :mod:`gea_graph.bench`, :mod:`gea_graph.viz`, :mod:`gea_graph.diagnostics` -- benchmark runner, pictures, analyses.
* :mod:`gea_graph.cli` -- the ``gea-graph`` command.
"""

from gea_graph.lazy import lazy_exports

__version__ = "0.1.0"


# gea_graph.load_model without importing the training stack at ``import gea_graph``.
__getattr__, __dir__ = lazy_exports(__name__, {"load_model": "inference"}, globals())
