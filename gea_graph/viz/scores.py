"""Reductions of attention maps to one score per atom.

External attention (GEA)
    The map of one graph is ``A[i, h, s]`` (``[n, H, S]``): node ``i``, head ``h``, external unit ``s``, after the
    double normalisation of GEAET Eq. 3 (softmax over the graph's nodes per unit, then L1 over the units per node),
    so every row ``A[i, h, :]`` sums to 1. The paper does not say how its Figs. 4 and 8 reduce this to one number per
    atom (GEAET notes §3.11 and §6.14). Because the rows sum to 1, the row sum is the same for every atom and carries
    no information; so is any unit-usage-weighted sum (``Σ_s A[i,s] / Σ_{k,s} A[k,s] = 1/n``). The information about
    *which atoms* stand out lives in the columns: how a unit's attention is shared among the atoms. Hence:

    ``"received"`` (default)
        ``score_i = mean_h mean_s A[i,h,s] / Σ_k A[k,h,s]``: the share of the external units' attention that lands
        on atom ``i``. It sums to 1 over the atoms of a molecule, exactly like the self-attention score below, so the
        two can be read on comparable scales (a uniform map gives ``1/n`` everywhere; a few bright atoms mean the
        units single them out, the "sparse" pattern of the paper's figures).
    ``"max"``
        ``score_i = mean_h max_s A[i,h,s]``: how firmly atom ``i`` commits to one unit (``1/S`` .. 1).
    ``"sharpness"``
        ``score_i = mean_h (1 - H(A[i,h,:]) / log S)``, with ``H`` the entropy: 0 for a uniform row, 1 for a one-hot
        row.

Self-attention
    The map of one graph is ``A[h, q, k]`` (``[H, n, n]``, rows = queries, each row sums to 1 over its keys),
    restricted to the real atoms (padding and a Graphormer graph token removed). The score is the attention each atom
    *receives*: ``score_k = mean_h mean_q A[h, q, k]``, which sums to 1 over the atoms when no graph token took a
    share (otherwise to 1 minus the token's mean share).

With ``head=h`` the mean over heads is replaced by head ``h`` alone.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

#: Names accepted by :func:`reduce_external`; the first is the default.
EXTERNAL_REDUCTIONS = ("received", "max", "sharpness")

_CAPTIONS = {
    "received": "GEA score = share of the external units' attention that lands on the atom (map normalised over "
    "the atoms per unit, then mean over units; {heads}); sums to 1 over the atoms",
    "max": "GEA score = the atom's largest attention weight over the external units ({heads})",
    "sharpness": "GEA score = 1 - entropy / log S of the atom's attention over the external units ({heads})",
    "self": "self-attention score = attention the atom receives (mean over query atoms; {heads}; padding and "
    "graph token excluded)",
}


def describe_reduction(reduction: str, head: int | None = None) -> str:
    """One sentence for a picture's caption saying how a score was obtained (``"self"`` for self-attention)."""
    if reduction not in _CAPTIONS:
        raise ValueError(
            f"unknown reduction {reduction!r}; choose from {(*EXTERNAL_REDUCTIONS, 'self')}"
        )
    return _CAPTIONS[reduction].format(heads="mean over heads" if head is None else f"head {head}")


def _pick_head(scores: Tensor, head: int | None, num_heads: int) -> Tensor:
    """``scores`` is ``[..., H]``; mean over heads or the chosen one."""
    if head is None:
        return scores.mean(dim=-1)
    if not -num_heads <= head < num_heads:
        raise ValueError(f"head {head} out of range: the layer has {num_heads} heads")
    return scores[..., head]


def reduce_external(attn: Tensor, reduction: str = "received", head: int | None = None) -> Tensor:
    """Per-atom scores ``[n]`` from one graph's external attention map ``attn`` ``[n, H, S]`` (see module doc)."""
    if attn.dim() != 3:
        raise ValueError(f"external attention map must be [n, H, S], got shape {tuple(attn.shape)}")
    attn = attn.detach().to(torch.float64)
    num_heads, num_units = attn.shape[1], attn.shape[2]
    if reduction == "received":
        per_head = (attn / attn.sum(dim=0, keepdim=True).clamp_min(1e-30)).mean(dim=2)
    elif reduction == "max":
        per_head = attn.amax(dim=2)
    elif reduction == "sharpness":
        entropy = -(attn * attn.clamp_min(1e-30).log()).sum(dim=2)
        per_head = (
            1.0 - entropy / math.log(num_units) if num_units > 1 else torch.ones_like(entropy)
        )
    else:
        raise ValueError(f"unknown reduction {reduction!r}; choose from {EXTERNAL_REDUCTIONS}")
    return _pick_head(per_head, head, num_heads)


def reduce_self(attn: Tensor, head: int | None = None) -> Tensor:
    """Per-atom received attention ``[n]`` from one graph's self-attention map ``attn`` ``[H, n, n]`` (atoms only)."""
    if attn.dim() != 3 or attn.shape[1] != attn.shape[2]:
        raise ValueError(f"self-attention map must be [H, n, n], got shape {tuple(attn.shape)}")
    received = attn.detach().to(torch.float64).mean(dim=1)  # [H, n]: mean over queries
    return _pick_head(received.transpose(0, 1), head, attn.shape[0])
