r"""AGF: attentive graph filter in the singular-value domain (Wi et al., 2025)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Module, Parameter

from .dense import merge_heads


def jacobi_coefficients(K: int, a: float, b: float) -> list[tuple[float, float, float]]:
    r"""Recurrence constants ``(w_k, w'_k, w''_k)`` for ``k = 2..K`` of the Jacobi polynomials
    :math:`P_k^{(a,b)}` (agf-notes §1.5; paper Eq. 24 with its ``+1`` typo fixed to ``-1``)."""
    out = []
    for k in range(2, K + 1):
        den1, den2 = k + a + b, 2 * k + a + b - 2
        if den1 == 0 or den2 == 0:
            raise ValueError(f"Jacobi recurrence undefined for a={a}, b={b} at k={k}")
        w = (2 * k + a + b) * (2 * k + a + b - 1) / (2 * k * den1)
        w1 = (2 * k + a + b - 1) * (a * a - b * b) / (2 * k * den1 * den2)
        w2 = (k + a - 1) * (k + b - 1) * (2 * k + a + b) / (k * den1 * den2)
        out.append((w, w1, w2))
    return out


class AGFAttention(Module):
    r"""The attentive graph filter (AGF) of Wi et al., `"Learning Advanced Self-Attention for
    Linear Transformers in the Singular Value Domain" <https://arxiv.org/abs/2505.08516>`_
    (IJCAI 2025, Eqs. 7-12), a linear-cost (:math:`O(N d_h^2)` per head) global attention:

    .. math::
        \mathrm{AGF}(\mathbf{X}) = \left(\mathbf{U}(\mathbf{X}) \odot
            g_\theta(\mathbf{S}(\mathbf{X}))\right)\left(\mathbf{V}(\mathbf{X})^\top
            \mathbf{X}\mathbf{W}_{val}\right),

    per head, with :math:`\mathbf{U} = \mathrm{softmax}_{d}(\mathbf{X}\mathbf{W}_U)` (Eq. 8,
    softmax over the :math:`d_h` singular index, per node), :math:`\mathbf{V} =
    \mathrm{softmax}_{N}(\mathbf{X}\mathbf{W}_V)` (Eq. 10, softmax over the *real nodes* of each
    graph), token-specific singular values :math:`\mathbf{S} = \sigma(\mathbf{X}\mathbf{W}_\Sigma)
    \in (0, 1)^{N \times d_h}` and the Jacobi-polynomial filter (Eqs. 6, 9)

    .. math::
        g_\theta(s) = \sum_{k=0}^{K} \theta_k P_k^{(a,b)}(s), \qquad \theta_0 = 1 \text{ (fixed)},
        \quad \theta_k = \tanh(\tilde\theta_k),\ \tilde\theta_k = 0 \text{ at init}.

    The :math:`d_h \times d_h` product :math:`\mathbf{V}^\top\mathbf{X}\mathbf{W}_{val}` is formed
    first, so no :math:`N \times N` matrix ever exists. At init :math:`g \equiv 1` and the layer is
    plain efficient attention :math:`\mathrm{softmax}_d(\mathbf{Q})\,
    \mathrm{softmax}_N(\mathbf{K})^\top\mathbf{V}` (rows of the implied :math:`\mathbf{H}` sum to 1).

    **Orthogonality regulariser** (Eq. 11, in the official code's form): per graph,
    :math:`L_{ortho} = \mathrm{mean}|\mathbf{U}^\top\mathbf{U} - \mathbf{I}| +
    \mathrm{mean}|\mathbf{V}^\top\mathbf{V} - \mathbf{I}|` (entrywise L1 mean over heads and the
    :math:`d_h \times d_h` Gram entries; padded nodes excluded from both Grams), averaged over the
    graphs of the batch. It is computed on every forward in training mode. :meth:`aux_loss`
    returns the last forward's value **already multiplied by** :obj:`ortho_weight`
    (:math:`\gamma`, Eq. 12; the paper searches :math:`\gamma \in \{10^{-1}, \dots, 10^{-4}\}`,
    default here :math:`10^{-2}`); ``aux_loss(weighted=False)`` gives the raw value. Add it to the
    task loss (the official code averages it over layers): ``loss = task + mean(l.aux_loss() for l
    in agf_layers)``. In eval mode (or before any forward) it is 0.

    Choices (agf-notes §7): softmax axes as in the code (B1); :math:`\theta` shared across heads
    with :math:`\theta_0` frozen at 1 (``fixI``, B2); :math:`\sigma(\cdot)` fed to the Jacobi basis
    without rescaling (B3); the node softmax of :math:`\mathbf{V}` and both Grams exclude padding
    (B5, B6); dropout (B8), if any, acts on :math:`\mathbf{U}\odot g`; the core runs in float32
    under autocast (B9). There is no :math:`N \times N` score matrix, hence **no additive attention
    bias**: passing :obj:`attn_bias` raises :class:`ValueError`.
    ``forward(..., return_attention=True)`` materialises the implied
    :math:`\mathbf{H} = (\mathbf{U}\odot g)\mathbf{V}^\top` ``[B, H, N, N]`` for pictures only.

    Args:
        channels (int): Size of each input and output node feature :math:`C`.
        heads (int): Number of heads :math:`H`.
        K (int, optional): Polynomial order. (default: :obj:`3`)
        a (float, optional): Jacobi :math:`a`. (default: :obj:`1.0`)
        b (float, optional): Jacobi :math:`b`. (default: :obj:`1.0`)
        ortho_weight (float, optional): :math:`\gamma` applied by :meth:`aux_loss`.
            (default: :obj:`1e-2`)
        dropout (float, optional): Dropout on :math:`\mathbf{U}\odot g`. (default: :obj:`0.0`)
        bias (bool, optional): Bias in the projections. (default: :obj:`True`)

    Shapes:
        - **input:** :math:`(B, N, C)`, mask :math:`(B, N)` bool
        - **output:** :math:`(B, N, C)`, padded rows zero.
    """

    def __init__(self, channels: int, heads: int, K: int = 3, a: float = 1.0, b: float = 1.0,
                 ortho_weight: float = 1e-2, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if channels % heads != 0:
            raise ValueError(f"'channels' ({channels}) must be divisible by 'heads' ({heads})")
        if K < 0:
            raise ValueError("'K' must be >= 0")
        self.channels, self.heads, self.head_dim = channels, heads, channels // heads
        self.K, self.a, self.b = int(K), float(a), float(b)
        self.ortho_weight = float(ortho_weight)
        self.dropout = float(dropout)
        self._rec = jacobi_coefficients(self.K, self.a, self.b)
        # One fused projection for W_U, W_V (singular vectors), W_val and W_Sigma.
        self.proj = Linear(channels, 4 * channels, bias=bias)
        self.out = Linear(channels, channels, bias=bias)
        self.theta = Parameter(torch.zeros(self.K))  # raw theta_1..theta_K
        self._ortho: Tensor | None = None

    def reset_parameters(self) -> None:
        self.proj.reset_parameters()
        self.out.reset_parameters()
        with torch.no_grad():
            self.theta.zero_()
        self._ortho = None

    def filter(self, s: Tensor) -> Tensor:
        r""":math:`g_\theta(s)` elementwise (works for any tensor :math:`s`, e.g. a grid on
        :math:`[0, 1]` to plot the response)."""
        theta = torch.tanh(self.theta).to(s.dtype)
        g = torch.ones_like(s)  # theta_0 * P_0, theta_0 = 1
        if self.K == 0:
            return g
        p_prev = torch.ones_like(s)
        p_cur = (self.a - self.b) / 2 + (self.a + self.b + 2) / 2 * s
        g = g + theta[0] * p_cur
        for i, (w, w1, w2) in enumerate(self._rec):
            p_prev, p_cur = p_cur, (w * s + w1) * p_cur - w2 * p_prev
            g = g + theta[i + 1] * p_cur
        return g

    def aux_loss(self, weighted: bool = True) -> Tensor:
        r"""The orthogonality regulariser of the last training forward, times :obj:`ortho_weight`
        unless ``weighted=False`` (a scalar; zero in eval mode or before any forward)."""
        if self._ortho is None:
            return self.theta.new_zeros(())
        return self._ortho * self.ortho_weight if weighted else self._ortho

    def forward(self, x: Tensor, mask: Tensor, attn_bias: Tensor | None = None,
                return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        if attn_bias is not None:
            raise ValueError("AGFAttention has no N x N score matrix, so it cannot apply an "
                             "additive 'attn_bias'; pass attn_bias=None (structure must enter "
                             "through node features) or use another attention")
        B, N, _ = x.shape
        H, D = self.heads, self.head_dim
        proj = self.proj(x).view(B, N, 4, H, D).permute(2, 0, 3, 1, 4)  # [4, B, H, N, D]
        dtype = x.dtype if x.dtype == torch.float64 else torch.float32
        with torch.autocast(x.device.type, enabled=False):
            proj = proj.to(dtype)
            u = torch.softmax(proj[0], dim=-1)
            # Node softmax over the real nodes of each graph; finfo.min (not -inf) keeps an empty
            # batch slot finite. Padded nodes get exactly 0 weight otherwise.
            keep = mask[:, None, :, None]
            vt = torch.softmax(proj[1].masked_fill(~keep, torch.finfo(dtype).min), dim=-2)
            kv = torch.matmul(vt.transpose(-1, -2), proj[2])  # [B, H, D, D]: linear in N
            gate = u * self.filter(torch.sigmoid(proj[3]))
            gate_d = F.dropout(gate, self.dropout, self.training) if self.dropout > 0 else gate
            out = torch.matmul(gate_d, kv)  # [B, H, N, D]
            if self.training:
                self._ortho = self._ortho_loss(u, vt, mask)
            else:
                self._ortho = None
        out = self.out(merge_heads(out).to(x.dtype))
        out = out.masked_fill(~mask[..., None], 0.0)
        if return_attention:
            attn = torch.matmul(gate, vt.transpose(-1, -2))
            attn = attn.masked_fill(~mask[:, None, :, None], 0.0)
            return out, attn
        return out

    def _ortho_loss(self, u: Tensor, vt: Tensor, mask: Tensor) -> Tensor:
        um = u * mask[:, None, :, None].to(u.dtype)
        eye = torch.eye(self.head_dim, dtype=u.dtype, device=u.device)
        gu = torch.matmul(um.transpose(-1, -2), um)
        gv = torch.matmul(vt.transpose(-1, -2), vt)
        per_graph = (gu - eye).abs().mean((1, 2, 3)) + (gv - eye).abs().mean((1, 2, 3))
        # mean over the graphs with a real node (no host sync; 0 when there is none)
        real = mask.any(-1).to(per_graph.dtype)
        return (per_graph * real).sum() / real.sum().clamp(min=1.0)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, K={self.K}, "
                f"a={self.a:g}, b={self.b:g}, ortho_weight={self.ortho_weight:g})")
