"""Positional-encoding specs ("lap:8,rw:20,spd:20") and batched application of pre-transforms."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch_geometric.data import Data
from torch_geometric.transforms import Compose
from tqdm.auto import tqdm

from gea_graph.transforms.lap_pe import LapPE
from gea_graph.transforms.rw_pe import RWPE
from gea_graph.transforms.spd import ShortestPathDistance

_KINDS = {
    "lap": lambda n: LapPE(n),
    "rw": lambda n: RWPE(n),
    "spd": lambda n: ShortestPathDistance(max_distance=n),
}


def parse_pe(spec: str | None) -> Callable | None:
    """Turns a spec such as ``"lap:8,rw:20"`` into a transform (:obj:`None` for an empty spec).

    Items are ``KIND:N`` with ``lap`` (:class:`LapPE` with ``k=N``), ``rw`` (:class:`RWPE` with ``walk_length=N``)
    or ``spd`` (:class:`ShortestPathDistance` with ``max_distance=N`` and paths of up to ``N`` edges), applied in the
    order given. ``paths:P`` right after an ``spd`` item keeps ``P`` edges per path instead (e.g. ``"spd:20,paths:5"``
    for a Graphormer with ``max_hops: 5``, a quarter of the storage of ``spd:20``).
    """
    if spec is None or not spec.strip():
        return None
    transforms = []
    for item in spec.split(","):
        kind, _, size = item.strip().partition(":")
        if kind == "paths" and size.isdigit():
            if not transforms or not isinstance(transforms[-1], ShortestPathDistance):
                raise ValueError(f"bad positional-encoding item {item!r} in {spec!r}: 'paths:P' sets the path length "
                                 f"of the 'spd:N' item just before it, e.g. 'spd:20,paths:5'")
            transforms[-1] = ShortestPathDistance(transforms[-1].max_distance, int(size))
            continue
        if kind not in _KINDS or not size.isdigit():
            raise ValueError(f"bad positional-encoding item {item!r} in {spec!r}: expected KIND:N with KIND one of "
                             f"{sorted(_KINDS)} and N a positive integer, e.g. 'lap:8,rw:20' (after 'spd:N' also "
                             f"'paths:P')")
        transforms.append(_KINDS[kind](int(size)))
    return transforms[0] if len(transforms) == 1 else Compose(transforms)


def apply_many(transform: Callable | None, data_list: Sequence[Data], desc: str = "pre-transform") -> list[Data]:
    """Applies a (pre-)transform to a list of graphs, using a transform's batched ``forward_many`` where it has one.

    :class:`~torch_geometric.transforms.Compose` is unrolled so that each of its parts can batch; any other callable
    runs graph by graph behind a progress bar.
    """
    data_list = list(data_list)
    if transform is None:
        return data_list
    if isinstance(transform, Compose):
        for part in transform.transforms:
            data_list = apply_many(part, data_list, desc)
        return data_list
    if hasattr(transform, "forward_many"):
        return transform.forward_many(data_list)
    return [transform(d) for d in tqdm(data_list, desc=f"{desc}: {transform!r}", leave=False,
                                       disable=len(data_list) < 1000)]
