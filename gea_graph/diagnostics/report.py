"""Per-layer oversmoothing tables and plots for one or more models (``gea-graph diagnose``).

Tables are lists of plain dict rows, written as CSV:

* ``layers.csv``: ``model, layer, cosine_similarity, dirichlet_energy, dirichlet_energy_normalised, graphs``; layer 0
  is the input of the first layer, layer ``l`` the output of layer ``l``; values are means over graphs.
* ``frequency_response.csv``: ``model, layer, head, source, lambda_re, lambda_im, response_re, response_im,
  response_abs`` for every GFSA layer and head: ``source="grid"`` on real ``λ ∈ [-1, 1]``, ``source="eigenvalue"``
  at the eigenvalues of the layer's attention matrices ``Ā`` on the diagnosed graphs.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from torch import Tensor, nn
from torch_geometric.data import Batch

from gea_graph.diagnostics.collect import collect_attention, collect_node_states
from gea_graph.diagnostics.measures import dirichlet_energy, gfsa_response, mean_cosine_similarity
from gea_graph.io import atomic_write, ensure_folder, save_figure
from gea_graph.models.introspect import find_layers
from gea_graph.nn.attention.gfsa import GFSA, GFSACoefficients

LAYER_COLUMNS = (
    "model",
    "layer",
    "cosine_similarity",
    "dirichlet_energy",
    "dirichlet_energy_normalised",
    "graphs",
)
RESPONSE_COLUMNS = (
    "model",
    "layer",
    "head",
    "source",
    "lambda_re",
    "lambda_im",
    "response_re",
    "response_im",
    "response_abs",
)


def layer_table(
    model: nn.Module,
    batches: Iterable[Batch],
    name: str,
    forward: Callable[[nn.Module, Batch], Any] | None = None,
) -> list[dict[str, Any]]:
    """Per layer, the mean over graphs of the cosine similarity and the Dirichlet energies (see ``measures``)."""
    per_layer: list[list[Tensor]] = []
    for batch in batches:
        states = collect_node_states(model, batch, forward)
        if not per_layer:
            per_layer = [[] for _ in states]
        for store, x in zip(per_layer, states):
            energy, normalised = dirichlet_energy(x, batch.edge_index, batch.batch)
            store.append(
                torch.stack([mean_cosine_similarity(x, batch.batch), energy, normalised], dim=1)
            )
    rows = []
    for layer, store in enumerate(per_layer):
        values = torch.cat(store)  # [graphs, 3]
        means = [
            float(v[~torch.isnan(v)].mean()) if (~torch.isnan(v)).any() else math.nan
            for v in values.T
        ]
        rows.append(dict(zip(LAYER_COLUMNS, (name, layer, *means, values.shape[0]))))
    return rows


def _gfsa_modules(model: nn.Module) -> list[GFSA | None]:
    """Per layer of the model's ``layers`` stack, its GFSA module or ``None``."""
    found = []
    for layer in find_layers(model):
        modules = [m for m in layer.modules() if isinstance(m, GFSA)]
        if len(modules) > 1:
            raise ValueError(f"a layer holds {len(modules)} GFSA modules; expected at most one")
        found.append(modules[0] if modules else None)
    return found


def gfsa_coefficients(model: nn.Module) -> list[GFSACoefficients | None]:
    """Per layer, the GFSA coefficients ``(w0, w1, wK, K)`` or ``None`` for a layer without GFSA."""
    return [m.coefficients() if m is not None else None for m in _gfsa_modules(model)]


@torch.no_grad()
def gfsa_eigenvalues(
    model: nn.Module,
    batches: Iterable[Batch],
    forward: Callable[[nn.Module, Batch], Any] | None = None,
) -> dict[int, list[Tensor]]:
    """Eigenvalues of every GFSA layer's attention matrix ``Ā`` on the graphs of ``batches``.

    ``Ā`` of a graph is the softmax map over its real positions (the graph token included when the model has one:
    it is part of the token graph the filter acts on).

    Returns:
        Per layer index (0-based) with GFSA, per head, the complex eigenvalues of all graphs, concatenated.
    """
    modules = {i: m for i, m in enumerate(_gfsa_modules(model)) if m is not None}
    if not modules:
        return {}
    found: dict[int, list[list[Tensor]]] = {
        i: [[] for _ in range(m.heads)] for i, m in modules.items()
    }
    for batch in batches:
        pairs = collect_attention(model, list(modules.values()), batch, forward)
        for i, (attn, mask) in zip(modules, pairs):
            attn = attn.to(torch.float64)
            for b in range(attn.shape[0]):
                real = mask[b].nonzero().flatten()
                if real.numel() == 0:
                    continue
                lam = torch.linalg.eigvals(attn[b][:, real][:, :, real])  # [H, n]
                for head in range(lam.shape[0]):
                    found[i][head].append(lam[head])
    return {
        i: [torch.cat(per_head) for per_head in heads]
        for i, heads in found.items()
        if heads and heads[0]
    }


def response_table(
    coefficients: Sequence[GFSACoefficients | None],
    name: str,
    eigenvalues: Mapping[int, Sequence[Tensor]] | None = None,
    grid_points: int = 101,
) -> list[dict[str, Any]]:
    """Rows of the GFSA frequency response per layer and head (layers whose entry is ``None`` have no GFSA).

    Args:
        coefficients: per layer (0-based), the layer's coefficients or ``None``.
        name: model name for the ``model`` column.
        eigenvalues: optional, per layer index, per head, complex eigenvalues of the layer's ``Ā``.
        grid_points: points of the real grid on ``[-1, 1]``.
    """
    rows: list[dict[str, Any]] = []
    grid = torch.linspace(-1.0, 1.0, grid_points, dtype=torch.float64).to(torch.complex128)
    for layer, coef in enumerate(coefficients):
        if coef is None:
            continue
        sources = [("grid", [grid] * coef.w0.numel())]
        if eigenvalues and layer in eigenvalues:
            sources.append(("eigenvalue", [lam.to(torch.complex128) for lam in eigenvalues[layer]]))
        for source, per_head in sources:
            for head, lam in enumerate(per_head):
                w = [c.detach().to(torch.float64)[head] for c in (coef.w0, coef.w1, coef.wK)]
                response = gfsa_response(lam, *w, coef.K)
                for lam_i, h_i in zip(lam.tolist(), response.tolist()):
                    values = (lam_i.real, lam_i.imag, h_i.real, h_i.imag, abs(h_i))
                    rows.append(
                        dict(zip(RESPONSE_COLUMNS, (name, layer + 1, head, source, *values)))
                    )
    return rows


def write_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], path: Path) -> Path:
    """Write ``rows`` to ``path`` (via a temporary file renamed into place)."""
    ensure_folder(path.parent)
    with atomic_write(path, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot_report(
    layer_rows: Sequence[Mapping[str, Any]], response_rows: Sequence[Mapping[str, Any]], path: Path
) -> Path:
    """One figure: cosine similarity and normalised Dirichlet energy against depth (one line per model) and, when
    there are GFSA layers, the filter response ``h(λ)`` on ``[-1, 1]`` (mean over heads; one line per layer, colour =
    depth, line style = model) with the responses at the eigenvalues of ``Ā`` as dots (real parts)."""
    models = list(dict.fromkeys(row["model"] for row in (*layer_rows, *response_rows)))
    grid_rows = [row for row in response_rows if row["source"] == "grid"]
    panels = 3 if grid_rows else 2
    fig = Figure(figsize=(5 * panels, 4), layout="constrained")
    axes = fig.subplots(1, panels)
    styles = ("-", "--", ":", "-.")
    for k, model in enumerate(models):
        rows = [row for row in layer_rows if row["model"] == model]
        if not rows:
            continue
        layers = [row["layer"] for row in rows]
        for ax, column in zip(axes[:2], ("cosine_similarity", "dirichlet_energy_normalised")):
            ax.plot(layers, [row[column] for row in rows], styles[k % 4], marker="o", label=model)
    axes[0].set(xlabel="layer", ylabel="mean pairwise cosine similarity", title="Cosine similarity")
    axes[1].set(
        xlabel="layer",
        ylabel="Σ‖xᵢ−xⱼ‖² / Σ‖xᵢ‖²",
        title="Normalised Dirichlet energy",
        yscale="log",
    )
    for ax in axes[:2]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
    if grid_rows:
        ax = axes[2]
        depth = max(row["layer"] for row in grid_rows)
        cmap = matplotlib.colormaps["viridis"]
        for k, model in enumerate(models):
            for layer in sorted({row["layer"] for row in grid_rows if row["model"] == model}):
                curve: dict[float, list[float]] = {}
                for row in grid_rows:
                    if row["model"] == model and row["layer"] == layer:
                        curve.setdefault(row["lambda_re"], []).append(row["response_re"])
                lam = sorted(curve)
                ax.plot(
                    lam,
                    [sum(curve[x]) / len(curve[x]) for x in lam],
                    styles[k % 4],
                    color=cmap(layer / max(depth, 1)),
                    label=f"{model} L{layer}",
                )
        points = [row for row in response_rows if row["source"] == "eigenvalue"]
        if points:
            ax.scatter(
                [row["lambda_re"] for row in points],
                [row["response_re"] for row in points],
                s=4,
                alpha=0.3,
                c=[cmap(row["layer"] / max(depth, 1)) for row in points],
                label="at eigenvalues of Ā (real parts)",
            )
        ax.axhline(0.0, color="grey", linewidth=0.5)
        ax.set(
            xlabel="eigenvalue λ of Ā (1 = lowest frequency)",
            ylabel="h(λ)",
            title="GFSA filter response",
        )
        ax.legend(fontsize="x-small", ncols=2)
    ensure_folder(path.parent)
    save_figure(fig, path, dpi=120)
    return path


def diagnose(
    models: Mapping[str, nn.Module],
    batches: Sequence[Batch] | Mapping[str, Sequence[Batch]],
    out_dir: Path,
    forward: Callable[[nn.Module, Batch], Any] | None = None,
) -> dict[str, Path]:
    """Measure every model and write ``layers.csv``, ``frequency_response.csv`` (GFSA layers only; not written when
    no model has one) and ``diagnostics.png`` into ``out_dir``.

    Args:
        models: display name -> model (e.g. ``{"graphormer": m1, "graphormer-gfsa": m2}``).
        batches: the graphs to measure, batched; or, per model name, its own batches of the same graphs (e.g. each
            with its recipe's positional encodings).
        out_dir: output folder (created).
        forward: how to call a model on a batch (default ``model(batch)``).

    Returns:
        The written files by kind: ``"layers"``, ``"frequency_response"`` (when a model has GFSA), ``"plot"``.
    """
    layer_rows: list[dict[str, Any]] = []
    response_rows: list[dict[str, Any]] = []
    for name, model in models.items():
        own = batches[name] if isinstance(batches, Mapping) else batches
        layer_rows += layer_table(model, own, name, forward)
        coefficients = gfsa_coefficients(model)
        if any(c is not None for c in coefficients):
            response_rows += response_table(
                coefficients, name, gfsa_eigenvalues(model, own, forward)
            )
    out_dir = Path(out_dir)
    written = {"layers": write_csv(layer_rows, LAYER_COLUMNS, out_dir / "layers.csv")}
    if response_rows:  # a table of no model's GFSA layer would be a header alone
        written["frequency_response"] = write_csv(
            response_rows, RESPONSE_COLUMNS, out_dir / "frequency_response.csv"
        )
    written["plot"] = plot_report(layer_rows, response_rows, out_dir / "diagnostics.png")
    return written
