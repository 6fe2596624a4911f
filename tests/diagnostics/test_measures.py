"""Oversmoothing measures and the GFSA frequency response."""

from __future__ import annotations

import itertools

import pytest
import torch

from gea_graph.diagnostics.measures import dirichlet_energy, gfsa_response, mean_cosine_similarity


def test_cosine_similarity_matches_pairwise_definition():
    x = torch.randn(7, 4, generator=torch.Generator().manual_seed(0))
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    got = mean_cosine_similarity(x, batch)
    for g in range(2):
        rows = x[batch == g]
        pairs = [
            torch.nn.functional.cosine_similarity(rows[i], rows[j], dim=0)
            for i, j in itertools.permutations(range(len(rows)), 2)
        ]
        assert got[g].item() == pytest.approx(torch.stack(pairs).mean().item(), abs=1e-6)
    same = mean_cosine_similarity(
        torch.ones(3, 2) * torch.tensor([[1.0], [2.0], [3.0]]), torch.zeros(3, dtype=torch.long)
    )
    assert same.item() == pytest.approx(1.0)
    assert torch.isnan(
        mean_cosine_similarity(torch.ones(1, 2), torch.zeros(1, dtype=torch.long))
    ).all()


def test_dirichlet_energy_definition():
    # path 0-1-2 and edge 3-4, both directions
    edge_index = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    batch = torch.tensor([0, 0, 0, 1, 1])
    x = torch.tensor([[0.0], [1.0], [3.0], [2.0], [2.0]])
    energy, normalised = dirichlet_energy(x, edge_index, batch)
    assert energy.tolist() == pytest.approx([(1 + 1 + 4 + 4) / 3, 0.0])
    assert normalised.tolist() == pytest.approx([10 / 10, 0.0])
    # the normalised form ignores the feature scale
    _, scaled = dirichlet_energy(5 * x, edge_index, batch)
    torch.testing.assert_close(scaled, normalised)


def test_gfsa_response_is_the_filter_eigenvalue():
    a = torch.rand(6, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    adj = (a + a.T) / 2
    d = adj.sum(1).rsqrt()
    a_bar = d[:, None] * adj * d[None, :]  # symmetric, so real eigenvalues
    w0, w1, wk, k = 0.1, 0.8, -0.3, 3.0
    filt = (
        w0 * torch.eye(6, dtype=torch.float64)
        + w1 * a_bar
        + wk * (a_bar + (k - 1) * (a_bar @ a_bar - a_bar))
    )
    lam = torch.linalg.eigvalsh(a_bar)
    expected = torch.sort(gfsa_response(lam, w0, w1, wk, k)).values
    torch.testing.assert_close(torch.linalg.eigvalsh(filt), expected)
    grid = torch.linspace(-1, 1, 5)
    torch.testing.assert_close(
        gfsa_response(grid, 0.0, 1.0, 0.0, 3.0), grid
    )  # vanilla attention: h(λ) = λ
    per_head = gfsa_response(
        grid[None, :], torch.zeros(2, 1), torch.ones(2, 1), torch.tensor([[0.0], [1.0]]), 2.0
    )
    assert per_head.shape == (2, 5)
