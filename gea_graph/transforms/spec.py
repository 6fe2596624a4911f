"""Positional-encoding specs ("lap:8,rw:20,spd:20") and batched application of pre-transforms."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch_geometric.data import Data
from torch_geometric.transforms import Compose
from tqdm.auto import tqdm

from gea_graph.transforms.lap_pe import LapPE
from gea_graph.transforms.rw_pe import RWPE
from gea_graph.transforms.spd import ShortestPathDistance


def _lap(n: int, norm: str = "sym", trivial: str = "drop", pad: str = "zero") -> LapPE:
    return LapPE(n, normalization=None if norm == "none" else norm, keep_trivial=trivial == "keep", padding=pad)


_KINDS = {
    "lap": _lap,
    "rw": lambda n: RWPE(n),
    "spd": lambda n: ShortestPathDistance(max_distance=n),
}
# Options of a kind (``KIND:N:key=value``) and their allowed values.
_OPTIONS = {
    "lap": {"norm": ("sym", "none"), "trivial": ("drop", "keep"), "pad": ("zero", "nan")},
}


def _options(kind: str, texts: Sequence[str], item: str) -> dict[str, str]:
    allowed = _OPTIONS.get(kind, {})
    options = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or key not in allowed or value not in allowed[key]:
            choices = "; ".join(f"{k}={'|'.join(v)}" for k, v in allowed.items()) or "none"
            raise ValueError(f"bad option {text!r} in positional-encoding item {item!r}: {kind} takes {choices}")
        options[key] = value
    return options


def parse_pe(spec: str | None) -> Callable | None:
    r"""Turns a spec such as ``"lap:8,rw:20"`` into a transform (:obj:`None` for an empty spec).

    Items are ``KIND:N`` with ``lap`` (:class:`LapPE` with ``k=N``), ``rw`` (:class:`RWPE` with ``walk_length=N``)
    or ``spd`` (:class:`ShortestPathDistance` with ``max_distance=N``), applied in the order given. ``lap`` takes
    options after its size, ``lap:N[:norm=sym|none][:trivial=drop|keep][:pad=zero|nan]`` (defaults first): the
    Laplacian normalisation, whether the trivial eigenpairs (:math:`\lambda = 0`) count among the ``N``, and the
    padding value of small graphs. The GEAET/GraphGPS Peptides LapPE is ``lap:10:norm=none:trivial=keep:pad=nan``.
    """
    if spec is None or not spec.strip():
        return None
    transforms = []
    for item in spec.split(","):
        kind, _, rest = item.strip().partition(":")
        size, *texts = rest.split(":")
        if kind not in _KINDS or not size.isdigit():
            raise ValueError(f"bad positional-encoding item {item!r} in {spec!r}: expected KIND:N with KIND one of "
                             f"{sorted(_KINDS)} and N a positive integer, e.g. 'lap:8,rw:20'")
        transforms.append(_KINDS[kind](int(size), **_options(kind, texts, item.strip())))
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
