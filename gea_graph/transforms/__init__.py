"""Positional encodings as PyG transforms, meant to run once as ``pre_transform`` and be cached.

- :class:`LapPE` adds ``lap_eigvec``, ``lap_eigval``, ``lap_mask`` (``[N, k]``);
- :class:`RWPE` adds ``rw_pe`` (``[N, L]``);
- :class:`ShortestPathDistance` adds ``spd_index`` (``[2, N*N]``), ``spd`` (``[N*N]``), ``spd_path``
  (``[N*N, max_path]``).

:func:`parse_pe` builds a transform from a spec such as ``"lap:8,rw:20"``; :func:`apply_many` runs one over a list of
graphs, batching where the transform supports it (``forward_many``). LapPE and RWPE build dense ``N x N`` matrices:
they refuse graphs beyond :data:`MAX_DENSE_NODES` nodes.
"""

from gea_graph.transforms._graphs import MAX_DENSE_NODES
from gea_graph.transforms.lap_pe import LapPE
from gea_graph.transforms.rw_pe import RWPE
from gea_graph.transforms.spd import ShortestPathDistance
from gea_graph.transforms.spec import apply_many, parse_pe

__all__ = ["MAX_DENSE_NODES", "RWPE", "LapPE", "ShortestPathDistance", "apply_many", "parse_pe"]
