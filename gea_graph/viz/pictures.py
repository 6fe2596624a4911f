"""Attention pictures of a model on molecules: the Python API behind ``gea-graph viz``.

>>> pic, records = attention_picture(model, graphs, kind="both")   # doctest: +SKIP
>>> pic.save("attention.png"); records[0].scores                     # doctest: +SKIP

``graphs`` are molecular PyG ``Data`` objects as the model was trained on (OGB atom features ``x [n, 9]``, bond
features, positional encodings) carrying their ``smiles``; node ``i`` is RDKit atom ``i`` of
``Chem.MolFromSmiles(smiles)`` (checked against the atomic numbers in ``x``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from gea_graph.models.introspect import find_layers
from gea_graph.viz.capture import KINDS, capture_attention, resolve_layer
from gea_graph.viz.draw import ImageFormat, MolPicture, Panel, draw_panels, to_mol
from gea_graph.viz.scores import describe_reduction, reduce_external, reduce_self

_SCALE_LABELS = {"external": "GEA score", "self": "self-attention received"}
_SHORT = {"external": "GEA", "self": "self-attn"}


@dataclass
class AtomAttention:
    """Per-atom attention of one molecule.

    Attributes:
        smiles: the molecule.
        kind: ``"external"`` or ``"self"``.
        layer: 1-based layer number in the model's ``layers`` stack.
        head: the head read, or ``None`` for the mean over heads.
        reduction: how the map was reduced (``"self"`` for self-attention; see :mod:`gea_graph.viz.scores`).
        scores: ``[n]`` per-atom scores, RDKit atom order.
        attention: the molecule's map, ``[n, H, S]`` (external) or ``[H, n, n]`` (self, atoms only).
    """

    smiles: str
    kind: str
    layer: int
    head: int | None
    reduction: str
    scores: np.ndarray
    attention: Tensor


def check_atom_order(graph: Data) -> None:
    """Check that ``graph`` has one node per RDKit atom of ``graph.smiles``, in RDKit order (via the OGB atomic-number
    feature ``x[:, 0] = atomic number - 1`` when ``x`` is ``[n, 9]``)."""
    smiles = getattr(graph, "smiles", None)
    if smiles is None:
        raise ValueError("the graph carries no 'smiles' string: cannot draw it")
    mol = to_mol(smiles)
    if mol.GetNumAtoms() != graph.num_nodes:
        raise ValueError(
            f"graph has {graph.num_nodes} nodes but {smiles!r} has {mol.GetNumAtoms()} atoms"
        )
    x = getattr(graph, "x", None)
    if isinstance(x, Tensor) and x.dim() == 2 and x.shape[1] == 9 and not x.is_floating_point():
        numbers = torch.tensor([a.GetAtomicNum() - 1 for a in mol.GetAtoms()])
        if not torch.equal(x[:, 0].cpu(), numbers):
            raise ValueError(
                f"node order of the graph differs from RDKit's atom order of {smiles!r}"
            )


def atom_attention(
    model: nn.Module,
    graphs: Sequence[Data],
    kind: str = "external",
    *,
    layer: int = -1,
    head: int | None = None,
    reduction: str = "received",
    forward: Callable[[nn.Module, Batch], Any] | None = None,
) -> list[AtomAttention]:
    """Per-atom attention scores of ``model`` on ``graphs`` from one layer (see :mod:`gea_graph.viz.scores`).

    Args:
        model: a model with a ``layers`` stack holding attention modules of ``kind``.
        graphs: molecular graphs with ``smiles`` (one batch is built from all of them).
        kind: ``"external"`` (GEA) or ``"self"``.
        layer: 1-based layer number, or negative from the end (default ``-1``: the last layer, which must hold an
            attention of ``kind``).
        head: a head (0-based) instead of the mean over heads.
        reduction: for ``"external"``, one of ``EXTERNAL_REDUCTIONS``; ignored for ``"self"``.
        forward: how to call the model on a batch (default ``model(batch)``).
    """
    for graph in graphs:
        check_atom_order(graph)
    batch = Batch.from_data_list(list(graphs))
    index = resolve_layer(model, kind, layer)
    maps = capture_attention(model, batch, kind, index + 1, forward)
    records = []
    for graph, attn in zip(graphs, maps):
        if kind == "external":
            scores, used = reduce_external(attn, reduction, head), reduction
        else:
            scores, used = reduce_self(attn, head), "self"
        records.append(
            AtomAttention(graph.smiles, kind, index + 1, head, used, scores.numpy(), attn)
        )
    return records


def attention_picture(
    model: nn.Module,
    graphs: Sequence[Data],
    kind: str = "external",
    *,
    layer: int = -1,
    head: int | None = None,
    reduction: str = "received",
    titles: Sequence[str] | None = None,
    fmt: ImageFormat = "png",
    cmap: str = "Reds",
    ncols: int | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    shared_scale: bool = False,
    forward: Callable[[nn.Module, Batch], Any] | None = None,
) -> tuple[MolPicture, list[AtomAttention]]:
    """Draw ``graphs`` with atoms coloured by the model's attention (GEAET paper, Figs. 4 and 8).

    Args:
        kind: ``"external"``, ``"self"``, or ``"both"`` (GEA and self-attention side by side per molecule, each kind
            with its own colour bar).
        titles: one title per graph (default: the SMILES).
        ncols: molecules per row (default: up to 3, or 2 with ``"both"``).
        vmin, vmax, shared_scale: colour ranges, see :func:`~gea_graph.viz.draw.draw_panels` (default: each panel
            from its lowest to its highest score).
        See :func:`atom_attention` for the other arguments.

    Returns:
        The picture and the per-atom records (molecule-major: with ``"both"``, GEA then self-attention per molecule).
    """
    kinds = list(KINDS) if kind == "both" else [kind]
    if kind != "both" and kind not in KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose from {(*KINDS, 'both')}")
    per_kind = {
        k: atom_attention(
            model, graphs, k, layer=layer, head=head, reduction=reduction, forward=forward
        )
        for k in kinds
    }
    titles = list(titles) if titles is not None else [g.smiles for g in graphs]
    if len(titles) != len(graphs):
        raise ValueError(f"{len(titles)} titles for {len(graphs)} graphs")
    records: list[AtomAttention] = []
    panels: list[Panel] = []
    for i, title in enumerate(titles):
        for k in kinds:
            record = per_kind[k][i]
            records.append(record)
            suffix = f": {_SHORT[k]}" if len(kinds) > 1 else ""
            panels.append(Panel(record.smiles, record.scores, f"{title}{suffix}", _SCALE_LABELS[k]))
    num_layers = len(find_layers(model))
    caption = "\n".join(
        f"{describe_reduction(per_kind[k][0].reduction, head)}; layer {per_kind[k][0].layer} of {num_layers}."
        for k in kinds
    )
    per_row = ncols if ncols is not None else (2 if len(kinds) > 1 else 3)
    picture = draw_panels(
        panels,
        ncols=per_row * len(kinds),
        caption=caption,
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        shared_scale=shared_scale,
        fmt=fmt,
    )
    return picture, records
