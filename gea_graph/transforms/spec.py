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


def _spd(n: int, paths: str | None = None) -> ShortestPathDistance:
    return ShortestPathDistance(max_distance=n, max_path=n if paths is None else int(paths))


_KINDS = {
    "lap": _lap,
    "rw": lambda n: RWPE(n),
    "spd": _spd,
}
#: Largest size N of each kind: LapPE keeps N eigenpairs per node and RWPE N walk steps (far beyond what the papers
#: use, 8 to 20, while bounding the memory of a build), a distance cap must fit the store's uint8 distances.
MAX_SIZE = {"lap": 256, "rw": 256, "spd": 254}
_SIZE_MEANS = {"lap": "eigenpairs per node", "rw": "random-walk steps", "spd": "the largest distance kept"}
# Options of a kind (``KIND:N:key=value``) and their allowed values (``int``: a non-negative integer).
_OPTIONS = {
    "lap": {"norm": ("sym", "none"), "trivial": ("drop", "keep"), "pad": ("zero", "nan")},
    "spd": {"paths": int},
}


def _allowed(values) -> str:
    return "N" if values is int else "|".join(values)


def _options(kind: str, texts: Sequence[str], item: str) -> dict[str, str]:
    allowed = _OPTIONS.get(kind, {})
    options = {}
    for text in texts:
        key, sep, value = text.partition("=")
        ok = key in allowed and (value.isdigit() if allowed[key] is int else value in allowed[key])
        if not sep or not ok:
            choices = "; ".join(f"{k}={_allowed(v)}" for k, v in allowed.items()) or "none"
            raise ValueError(f"bad option {text!r} in positional-encoding item {item!r}: {kind} takes {choices}")
        options[key] = value
    return options


def parse_pe(spec: str | None) -> Callable | None:
    r"""Turns a spec such as ``"lap:8,rw:20"`` into a transform (:obj:`None` for an empty spec).

    Items are ``KIND:N`` with ``lap`` (:class:`LapPE` with ``k=N``), ``rw`` (:class:`RWPE` with ``walk_length=N``)
    or ``spd`` (:class:`ShortestPathDistance` with ``max_distance=N`` and paths of up to ``N`` edges), applied in the
    order given. Options follow the size as ``:key=value``:

    - ``lap:N[:norm=sym|none][:trivial=drop|keep][:pad=zero|nan]`` (defaults first): the Laplacian normalisation,
      whether the trivial eigenpairs (:math:`\lambda = 0`) count among the ``N``, and the padding value of small
      graphs. The GEAET/GraphGPS Peptides LapPE is ``lap:10:norm=none:trivial=keep:pad=nan``.
    - ``spd:N[:paths=P]``: keep ``P`` edges per shortest path instead of ``N`` (e.g. ``spd:20:paths=5`` for a
      Graphormer with ``max_hops: 5``, a quarter of the storage of ``spd:20``).
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
        if not 1 <= int(size) <= MAX_SIZE[kind]:
            raise ValueError(f"bad positional-encoding item {item!r} in {spec!r}: N must be in 1..{MAX_SIZE[kind]} "
                             f"for {kind} ({_SIZE_MEANS[kind]})")
        options = _options(kind, texts, item.strip())
        if kind == "spd" and int(options.get("paths", 0)) > MAX_SIZE["spd"]:
            raise ValueError(f"bad positional-encoding item {item!r} in {spec!r}: paths must be in "
                             f"0..{MAX_SIZE['spd']}")
        transforms.append(_KINDS[kind](int(size), **options))
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
