r"""GFSA: graph-filter-based self-attention (Choi et al., 2023)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

from .multihead import DenseAttentionBase

_COEFFS = ("w0", "w1", "wK")


class GFSACoefficients(NamedTuple):
    r"""Current GFSA coefficients of one layer (detached): ``w0, w1, wK`` of shape ``[H]`` and
    ``K``, so that :math:`g(\lambda) = w_0 + w_1\lambda + w_K(\lambda + (K-1)(\lambda^2-\lambda))`
    is the response of :math:`\mathbf{H}` at an eigenvalue :math:`\lambda` of :math:`\bar{\mathbf{A}}`."""

    w0: Tensor
    w1: Tensor
    wK: Tensor
    K: float


class GFSA(DenseAttentionBase):
    r"""Graph-filter-based self-attention from Choi et al., `"Graph Convolutions Enrich the Self-Attention in
    Transformers!" <https://arxiv.org/abs/2312.04234>`_ (Eqs. 4-6, Algorithm 1): the softmax attention matrix
    :math:`\bar{\mathbf{A}}` (biased and masked, as in :class:`MultiheadAttention`) becomes, per head,

    .. math::
        \mathbf{H} = w_0 \mathbf{I} + w_1 \bar{\mathbf{A}}
            + w_K\left(\bar{\mathbf{A}} + (K-1)(\bar{\mathbf{A}}^2 - \bar{\mathbf{A}})\right),
        \qquad \mathrm{GFSA}(\mathbf{X}) = \mathbf{H}\mathbf{X}\mathbf{W}_{val}

    (Eq. 4: a first-order Taylor approximation of :math:`\bar{\mathbf{A}}^K`), evaluated without forming
    :math:`\bar{\mathbf{A}}^2`: with :math:`\mathbf{Y} = \bar{\mathbf{A}}\mathbf{V}`,

    .. math::
        \mathbf{H}\mathbf{V} = w_0\mathbf{V} + (w_1 + (2-K)w_K)\,\mathbf{Y}
            + (K-1)w_K\,\bar{\mathbf{A}}\mathbf{Y},

    i.e. :math:`O(N^2 d)` per head instead of :math:`O(N^3)`.

    Coefficients are per head and per layer, initialised to :math:`(w_0, w_1, w_K) = (0, 1, 0)` (the layer starts
    as softmax attention); :obj:`learn` names the learnable ones, the others are fixed buffers. Attention dropout
    acts on :math:`\bar{\mathbf{A}}` before the filter; :math:`\mathbf{H}` is not renormalised.
    :meth:`filter_response` evaluates :math:`g(\lambda)` at eigenvalues of :math:`\bar{\mathbf{A}}` (which
    ``return_attention=True`` gives). Differences from the authors' code and notes: ``docs/fidelity.md``.

    Args:
        channels (int): Size of each input and output node feature :math:`C`.
        heads (int): Number of heads :math:`H`.
        K (float, optional): The order :math:`K` of the approximated high-order term. (default: :obj:`2`)
        learn (Sequence[str], optional): The learnable ones of ``"w0"``, ``"w1"``, ``"wK"``. (default: all three)
        w0_init (float, optional): Initial (or fixed) :math:`w_0`. (default: :obj:`0.0`)
        w1_init (float, optional): Initial (or fixed) :math:`w_1`. (default: :obj:`1.0`)
        wK_init (float, optional): Initial :math:`w_K`. (default: :obj:`0.0`)
        dropout (float, optional): Attention dropout probability. (default: :obj:`0.0`)
        bias (bool, optional): Bias in the projections. (default: :obj:`True`)
        impl (str, optional): How a packed call runs: :obj:`"auto"`, :obj:`"grouped"` or :obj:`"dense"` (see
            :class:`~gea_graph.nn.attention.multihead.DenseAttentionBase`). (default: :obj:`"auto"`)

    Shapes:
        - **input:** :math:`(B, N, C)`, mask :math:`(B, N)` bool, optional bias :math:`(B, H, N, N)`; or packed
          :math:`(\sum N_i, C)` and a plan
        - **output:** :math:`(B, N, C)`, padded rows zero; or :math:`(\sum N_i, C)`
    """

    def __init__(self, channels: int, heads: int, K: float = 2, learn: Sequence[str] | str = _COEFFS,
                 w0_init: float = 0.0, w1_init: float = 1.0, wK_init: float = 0.0,
                 dropout: float = 0.0, bias: bool = True, impl: str = "auto") -> None:
        super().__init__(channels, heads, dropout=dropout, bias=bias, impl=impl)
        if isinstance(learn, str):
            learn = (learn, )
        learn = tuple(learn)
        unknown = set(learn) - set(_COEFFS)
        if unknown:
            raise ValueError(f"Unknown GFSA coefficients {sorted(unknown)} (choose from {_COEFFS})")
        self.K = float(K)
        self.learn = learn
        self.inits = {"w0": float(w0_init), "w1": float(w1_init), "wK": float(wK_init)}
        for name in _COEFFS:
            t = torch.full((heads, ), self.inits[name])
            if name in learn:
                self.register_parameter(name, Parameter(t))
            else:
                self.register_buffer(name, t)
        # A fixed w0 == 0 needs no identity term at all (saves a pass over V).
        self._use_w0 = "w0" in learn or self.inits["w0"] != 0.0

    def reset_parameters(self) -> None:
        super().reset_parameters()
        with torch.no_grad():
            for name in _COEFFS:
                getattr(self, name).fill_(self.inits[name])

    # ------------------------------------------------------------------------------------------
    def polynomial(self) -> tuple[Tensor, Tensor, Tensor]:
        r"""Coefficients ``(c0, c1, c2)``, each ``[H]``, of the expanded filter
        :math:`\mathbf{H} = c_0\mathbf{I} + c_1\bar{\mathbf{A}} + c_2\bar{\mathbf{A}}^2`
        (with gradients)."""
        K = self.K
        return self.w0, self.w1 + (2.0 - K) * self.wK, (K - 1.0) * self.wK

    def coefficients(self) -> GFSACoefficients:
        r"""Detached ``(w0, w1, wK, K)`` with ``w*`` of shape ``[H]`` (the diagnostics'
        ``FilterCoefficients`` fields)."""
        return GFSACoefficients(self.w0.detach().clone(), self.w1.detach().clone(),
                                self.wK.detach().clone(), self.K)

    @torch.no_grad()
    def filter_response(self, lam: Tensor) -> Tensor:
        r"""Response :math:`g(\lambda) = c_0 + c_1\lambda + c_2\lambda^2` per head: ``lam`` of any
        shape (real or complex) -> ``[H, *lam.shape]``."""
        c0, c1, c2 = (c.detach().view(-1, *([1] * lam.dim())) for c in self.polynomial())
        lam = lam.unsqueeze(0)
        return c0 + c1 * lam + c2 * lam * lam

    def attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
               need_weights: bool) -> tuple[Tensor, Tensor | None]:
        c0, c1, c2 = self.polynomial()
        attn = self._softmax_weights(q, k, bias)  # \bar{A}, [B, H, N, N]
        # Dropout before the filter; the same dropped matrix serves both products (as the authors' Graphormer code,
        # which squares the dropped-out matrix).
        a = F.dropout(attn, self.dropout, self.training)
        y = torch.matmul(a, v)  # \bar{A} V
        out = torch.matmul(a, torch.addcmul(v * c1.to(v.dtype).view(1, -1, 1, 1), y, c2.to(v.dtype).view(1, -1, 1, 1)))
        if self._use_w0:
            out = out + v * c0.to(v.dtype).view(1, -1, 1, 1)
        return out, (attn if need_weights else None)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, K={self.K:g}, "
                f"learn={self.learn}, dropout={self.dropout})")
