"""Oversmoothing measures on node representations, and the GFSA filter's frequency response.

All measures take a PyG-style sparse batch (node features ``x [ΣN, C]``, ``batch [ΣN]``) and return one value per
graph, so that a caller averages over graphs (a graph's value never depends on its batch-mates).

* Cosine similarity (GFSA §4 / Fig. 5 "cosine similarity across layers", computed as in ContraNorm, Guo et al. 2023):
  the mean of ``cos(x_i, x_j)`` over the ordered pairs ``i != j`` of one graph. It rises toward 1 as representations
  collapse to one direction.
* Dirichlet energy (not in the GFSA paper, which measures cosine similarity, the filter response and singular values;
  this is the standard oversmoothing measure of Cai & Wang 2020 and Rusch, Bronstein & Mishra 2023):
  ``E(X) = 1/n · Σ_i Σ_{j ∈ N(i)} ||x_i - x_j||²`` over the graph's edges (both directions of an undirected edge),
  and its scale-free *normalised* form ``E(X) / (1/n · Σ_i ||x_i||²) = Σ_{(i,j)} ||x_i - x_j||² / Σ_i ||x_i||²``,
  a Rayleigh quotient of the graph Laplacian. Both fall to 0 when the nodes of a connected graph become equal; the
  normalised one is not fooled by a layer that merely shrinks or blows up the feature scale.
* GFSA frequency response (GFSA §3, Eq. 8 with the Taylor approximation of ``Ā^K``; §4 filter response):
  ``H = w0·I + w1·Ā + wK·(Ā + (K−1)(Ā² − Ā))`` is a polynomial in ``Ā``, so on an eigenvector of ``Ā`` with
  eigenvalue ``λ`` it multiplies by ``h(λ) = w0 + w1·λ + wK·(λ + (K−1)(λ² − λ))``. ``λ = 1`` (the constant
  vector, the "DC" component of a row-stochastic ``Ā``) is the lowest frequency; smaller or negative ``λ`` are
  higher frequencies. Vanilla attention (``w0 = wK = 0, w1 = 1``) passes ``λ`` unchanged, a low-pass filter because
  ``|λ| ≤ 1`` everywhere on the spectrum of a row-stochastic matrix.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter


def _num_graphs(batch: Tensor) -> int:
    return int(batch.max()) + 1 if batch.numel() else 0


def mean_cosine_similarity(x: Tensor, batch: Tensor) -> Tensor:
    """Per graph, the mean cosine similarity over ordered pairs of distinct nodes.

    Args:
        x: node representations ``[ΣN, C]``.
        batch: graph id of each node ``[ΣN]``.

    Returns:
        ``[B]``; a graph with one node gets NaN (it has no pair).
    """
    unit = torch.nn.functional.normalize(x.detach().to(torch.float64), dim=-1)
    size = _num_graphs(batch)
    sums = scatter(unit, batch, dim=0, dim_size=size, reduce="sum")  # [B, C]
    counts = torch.bincount(batch, minlength=size).to(torch.float64)
    # Σ_{i≠j} u_i·u_j = ||Σ_i u_i||² − Σ_i ||u_i||²  (zero rows have ||u_i|| = 0)
    self_terms = scatter((unit * unit).sum(-1), batch, dim=0, dim_size=size, reduce="sum")
    pair_sum = (sums * sums).sum(-1) - self_terms
    pairs = counts * (counts - 1)
    return torch.where(
        pairs > 0, pair_sum / pairs.clamp_min(1), torch.full_like(pair_sum, float("nan"))
    )


def dirichlet_energy(x: Tensor, edge_index: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
    """Per graph, the Dirichlet energy and its normalised form (see the module docstring).

    Args:
        x: node representations ``[ΣN, C]``.
        edge_index: ``[2, ΣE]`` with both directions of every undirected edge.
        batch: graph id of each node ``[ΣN]``.

    Returns:
        ``(energy [B], normalised [B])``; the normalised energy of an all-zero graph is NaN.
    """
    x = x.detach().to(torch.float64)
    size = _num_graphs(batch)
    src, dst = edge_index
    diff = (x[src] - x[dst]).pow(2).sum(-1)
    edge_sum = scatter(diff, batch[src], dim=0, dim_size=size, reduce="sum")
    norm_sum = scatter(x.pow(2).sum(-1), batch, dim=0, dim_size=size, reduce="sum")
    counts = torch.bincount(batch, minlength=size).to(torch.float64)
    energy = edge_sum / counts.clamp_min(1)
    normalised = torch.where(
        norm_sum > 0, edge_sum / norm_sum.clamp_min(1e-300), torch.full_like(edge_sum, float("nan"))
    )
    return energy, normalised


def gfsa_response(
    lam: Tensor, w0: Tensor | float, w1: Tensor | float, wK: Tensor | float, K: float
) -> Tensor:
    """``h(λ) = w0 + w1·λ + wK·(λ + (K−1)(λ² − λ))`` (GFSA Eq. 8), broadcast over ``lam`` and the coefficients.

    ``lam`` may be complex (the eigenvalues of a non-symmetric attention matrix); pass real coefficients of a common
    shape, e.g. ``[H, 1]`` against ``lam`` ``[1, M]`` for one curve per head.
    """
    high_order = lam + (K - 1) * (lam * lam - lam)
    return w0 + w1 * lam + wK * high_order
