"""Molecules drawn with RDKit, each atom coloured by a score, with colour bars and a caption.

The whole picture is drawn by one ``rdMolDraw2D`` canvas (``MolDraw2DCairo`` for PNG, ``MolDraw2DSVG`` for SVG), so
the two formats come from the same code and the SVG stays vector. Molecules sit in a grid of square panels, each with
its own horizontal colour bar below it; the caption comes under the grid.

Atom ``i`` of a picture is atom ``i`` of ``Chem.MolFromSmiles(smiles)``, which is node ``i`` of OGB's
``smiles2graph(smiles)`` (it walks ``mol.GetAtoms()`` in order), so node scores of a molecular graph can be drawn
without any re-indexing.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import matplotlib
import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import rdDepictor
from rdkit.Chem.Draw import rdMolDraw2D
from rdkit.Geometry import Point2D

from gea_graph.io import ensure_folder, write_bytes, write_text

MolLike = str | Chem.Mol
ImageFormat = Literal["png", "svg"]

#: Only this lower part of the colour map is used, so that black atom symbols stay legible on the darkest highlight.
CMAP_TOP = 0.8
#: Highlight circle radius, in bond-length units.
HIGHLIGHT_RADIUS = 0.42

_BAR_ROW = 56  # pixels under each molecule for its colour bar (label, bar, tick values)
_BAR_HEIGHT = 14
_MARGIN = 16
_FONT = 13.0
_LINE = 18


def to_mol(molecule: MolLike) -> Chem.Mol:
    """Return an RDKit molecule with 2D coordinates, parsing ``molecule`` if it is a SMILES string.

    Raises:
        ValueError: if the SMILES cannot be parsed; the message names it.
    """
    if isinstance(molecule, Chem.Mol):
        mol = Chem.Mol(molecule)
    elif isinstance(molecule, str):
        with rdBase.BlockLogs():
            mol = Chem.MolFromSmiles(molecule)
        if mol is None:
            raise ValueError(f"cannot parse SMILES {molecule!r}: RDKit returned no molecule")
    else:
        raise TypeError(f"expected a SMILES string or an RDKit Mol, got {type(molecule).__name__}")
    if mol.GetNumConformers() == 0:
        rdDepictor.Compute2DCoords(mol)
    return mol


@dataclass(frozen=True)
class ColourScale:
    """A linear map from scores in ``[vmin, vmax]`` to a matplotlib colour map (its lower ``CMAP_TOP`` part)."""

    label: str
    vmin: float
    vmax: float
    cmap: str = "Reds"

    def fraction(self, value: float) -> float:
        """Position of ``value`` on the bar, clipped to ``[0, 1]``."""
        span = self.vmax - self.vmin
        if span <= 0:
            return 0.5
        return float(min(max((value - self.vmin) / span, 0.0), 1.0))

    def colour(self, value: float) -> tuple[float, float, float]:
        """RGB colour of ``value``."""
        rgba = matplotlib.colormaps[self.cmap](CMAP_TOP * self.fraction(value))
        return (float(rgba[0]), float(rgba[1]), float(rgba[2]))


@dataclass
class Panel:
    """One molecule of a picture.

    Args:
        molecule: SMILES or RDKit molecule.
        scores: one score per atom, in RDKit atom order.
        title: text under the molecule.
        scale: name of the colour scale (and colour bar) this panel uses.
    """

    molecule: MolLike
    scores: Sequence[float]
    title: str = ""
    scale: str = "score"


@dataclass
class MolPicture:
    """A drawn picture and what it shows.

    Attributes:
        image: PNG bytes or SVG text.
        fmt: ``"png"`` or ``"svg"``.
        mols: the drawn molecules, one per panel.
        scores: per panel, the per-atom scores (``[num_atoms]`` float arrays).
        titles: per panel, its title.
        atom_xy: per panel, ``[num_atoms, 2]`` pixel coordinates of the atoms on the canvas (x right, y down).
        scales: per panel, its colour scale.
        caption: the caption text.
        size: ``(width, height)`` in pixels.
    """

    image: bytes | str
    fmt: ImageFormat
    mols: list[Chem.Mol]
    scores: list[np.ndarray]
    titles: list[str]
    atom_xy: list[np.ndarray]
    scales: list[ColourScale]
    caption: str
    size: tuple[int, int]

    def save(self, path: str | Path) -> Path:
        """Write the picture to ``path``, whose suffix must match the format."""
        path = Path(path)
        if path.suffix.lower() != f".{self.fmt}":
            raise ValueError(
                f"picture is {self.fmt.upper()} but the path {str(path)!r} ends in {path.suffix!r}"
            )
        ensure_folder(path.parent)
        if isinstance(self.image, bytes):
            write_bytes(path, self.image)
        else:
            write_text(path, self.image)
        return path

    def _repr_png_(self) -> bytes | None:
        return self.image if self.fmt == "png" else None

    def _repr_svg_(self) -> str | None:
        return self.image if self.fmt == "svg" else None


def format_from_path(path: str | Path) -> ImageFormat:
    """``"png"`` or ``"svg"`` from a file name; anything else is a ``ValueError``."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".png", ".svg"):
        raise ValueError(f"output must end in .png or .svg, got {str(path)!r}")
    return "png" if suffix == ".png" else "svg"


def draw_molecule(
    molecule: MolLike,
    scores: Sequence[float],
    *,
    title: str = "",
    label: str = "score",
    caption: str = "",
    cmap: str = "Reds",
    vmin: float | None = None,
    vmax: float | None = None,
    fmt: ImageFormat = "png",
    panel_size: int = 360,
) -> MolPicture:
    """Draw one molecule with its atoms coloured by ``scores`` (see :func:`draw_panels`)."""
    return draw_panels(
        [Panel(molecule, scores, title, label)],
        caption=caption,
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        fmt=fmt,
        panel_size=panel_size,
    )


def draw_panels(
    panels: Sequence[Panel],
    *,
    ncols: int | None = None,
    caption: str = "",
    cmap: str = "Reds",
    vmin: float | None = None,
    vmax: float | None = None,
    shared_scale: bool = False,
    fmt: ImageFormat = "png",
    panel_size: int = 300,
) -> MolPicture:
    """Draw molecules in a grid, each atom highlighted with the colour of its score, a colour bar under each.

    A panel's colour range is ``[vmin, vmax]`` when given, else from the lowest to the highest score of the panel (so
    that differences show even when the scores are close; the bar's numbers give the actual range), or, with
    ``shared_scale``, of all panels with the same ``Panel.scale`` label. Atom symbols are drawn in black so they stay
    legible on every highlight.

    Args:
        panels: the molecules, in reading order (row by row).
        ncols: panels per row (default: all in one row, at most 3).
        caption: text under the grid (each line wrapped to the picture width).
        cmap: a matplotlib colour map name.
        vmin, vmax: fixed range for every panel.
        shared_scale: one range per ``Panel.scale`` label instead of one per panel.
        fmt: ``"png"`` (Cairo) or ``"svg"``.
        panel_size: side of one square molecule panel in pixels (its colour bar comes below).

    Returns:
        The picture, with the per-atom scores and the atoms' pixel coordinates.
    """
    if not panels:
        raise ValueError("nothing to draw: no panels")
    if fmt not in ("png", "svg"):
        raise ValueError(f"fmt must be 'png' or 'svg', got {fmt!r}")
    mols = [to_mol(p.molecule) for p in panels]
    scores = [np.asarray(p.scores, dtype=np.float64).reshape(-1) for p in panels]
    for mol, score, panel in zip(mols, scores, panels):
        if score.shape[0] != mol.GetNumAtoms():
            raise ValueError(
                f"{score.shape[0]} scores for a molecule with {mol.GetNumAtoms()} atoms ({Chem.MolToSmiles(mol)})"
            )
        if not np.isfinite(score).all():
            raise ValueError(f"non-finite scores for panel {panel.title!r}")

    scales = _make_scales(panels, scores, cmap, vmin, vmax, shared_scale)
    ncols = min(len(panels), 3) if ncols is None else max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    cell_height = panel_size + _BAR_ROW
    width = ncols * panel_size
    chars_per_line = max(20, int((width - 2 * _MARGIN) / (0.52 * _FONT)))
    lines = [
        wrapped for line in caption.splitlines() for wrapped in textwrap.wrap(line, chars_per_line)
    ]
    height = nrows * cell_height + len(lines) * _LINE + _MARGIN

    if fmt == "png":
        drawer = rdMolDraw2D.MolDraw2DCairo(width, height, panel_size, panel_size)
    else:
        drawer = rdMolDraw2D.MolDraw2DSVG(width, height, panel_size, panel_size)
    options = drawer.drawOptions()
    options.useBWAtomPalette()
    options.legendFontSize = 15
    options.fillHighlights = True

    atom_xy: list[np.ndarray] = []
    for k, (mol, score, panel, scale) in enumerate(zip(mols, scores, panels, scales)):
        n = mol.GetNumAtoms()
        left, top = (k % ncols) * panel_size, (k // ncols) * cell_height
        drawer.SetOffset(left, top)
        drawer.DrawMolecule(
            mol,
            highlightAtoms=list(range(n)),
            highlightAtomColors={i: scale.colour(score[i]) for i in range(n)},
            highlightAtomRadii={i: HIGHLIGHT_RADIUS for i in range(n)},
            highlightBonds=[],
            legend=panel.title,
        )
        atom_xy.append(
            np.array([[drawer.GetDrawCoords(i).x, drawer.GetDrawCoords(i).y] for i in range(n)])
        )
        drawer.SetOffset(0, 0)
        _draw_colour_bar(drawer, scale, left, top + panel_size, panel_size)

    drawer.SetOffset(0, 0)
    drawer.SetColour((0.0, 0.0, 0.0))
    drawer.SetFontSize(_FONT)
    y = nrows * cell_height
    for line in lines:
        drawer.DrawString(line, Point2D(_MARGIN, y + _LINE / 2), 1, True)
        y += _LINE
    drawer.FinishDrawing()

    return MolPicture(
        image=drawer.GetDrawingText(),
        fmt=fmt,
        mols=mols,
        scores=scores,
        titles=[p.title for p in panels],
        atom_xy=atom_xy,
        scales=scales,
        caption=caption,
        size=(width, height),
    )


def _make_scales(
    panels: Sequence[Panel],
    scores: Sequence[np.ndarray],
    cmap: str,
    vmin: float | None,
    vmax: float | None,
    shared: bool,
) -> list[ColourScale]:
    """One colour scale per panel."""
    scales = []
    for panel, score in zip(panels, scores):
        values = (
            np.concatenate([s for s, p in zip(scores, panels) if p.scale == panel.scale])
            if shared
            else score
        )
        lo = float(values.min()) if vmin is None else vmin
        hi = float(values.max()) if vmax is None else vmax
        scales.append(ColourScale(panel.scale, lo, hi, cmap))
    return scales


def _draw_colour_bar(
    drawer: rdMolDraw2D.MolDraw2D, scale: ColourScale, x0: float, top: float, width: int
) -> None:
    """A horizontal colour bar with its label and range in the band ``[x0, x0 + width] x [top, top + _BAR_ROW]``."""
    left, right = x0 + 2 * _MARGIN, x0 + width - 2 * _MARGIN
    bar_top = top + 20
    drawer.SetColour((0.0, 0.0, 0.0))
    drawer.SetFontSize(_FONT)
    drawer.DrawString(scale.label, Point2D(x0 + width / 2, top + 8), 0, True)
    steps = 48
    step = (right - left) / steps
    drawer.SetFillPolys(True)
    for j in range(steps):
        rgba = matplotlib.colormaps[scale.cmap](CMAP_TOP * (j + 0.5) / steps)
        drawer.SetColour((float(rgba[0]), float(rgba[1]), float(rgba[2])))
        x = left + j * step
        drawer.DrawRect(Point2D(x, bar_top), Point2D(x + step + 0.5, bar_top + _BAR_HEIGHT), True)
    drawer.SetFillPolys(False)
    drawer.SetColour((0.0, 0.0, 0.0))
    drawer.DrawRect(Point2D(left, bar_top), Point2D(right, bar_top + _BAR_HEIGHT), True)
    ticks = (scale.vmin, (scale.vmin + scale.vmax) / 2, scale.vmax)
    for value, x, align in zip(ticks, (left, (left + right) / 2, right), (1, 0, 2)):
        drawer.DrawString(f"{value:.3g}", Point2D(x, bar_top + _BAR_HEIGHT + 10), align, True)
    drawer.SetFillPolys(True)
