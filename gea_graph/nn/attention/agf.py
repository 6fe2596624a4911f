r"""AGF: attentive graph filter in the singular-value domain (Wi et al., 2025)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Module, Parameter

from .dense import merge_heads
from .plan import AttentionPlan, check_impl


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
    r"""The attentive graph filter (AGF) of Wi et al., `"Learning Advanced Self-Attention for Linear Transformers in
    the Singular Value Domain" <https://arxiv.org/abs/2505.08516>`_ (IJCAI 2025, Eqs. 7-12), a global attention of
    linear cost (:math:`O(N d_h^2)` per head):

    .. math::
        \mathrm{AGF}(\mathbf{X}) = \left(\mathbf{U} \odot g_\theta(\mathbf{S})\right)
            \left(\mathbf{V}^\top \mathbf{X}\mathbf{W}_{val}\right), \qquad
        g_\theta(s) = \sum_{k=0}^{K} \theta_k P_k^{(a,b)}(s)

    per head, with :math:`\mathbf{U} = \mathrm{softmax}_{d}(\mathbf{X}\mathbf{W}_U)` (Eq. 8, over the :math:`d_h`
    singular index), :math:`\mathbf{V} = \mathrm{softmax}_{N}(\mathbf{X}\mathbf{W}_V)` (Eq. 10, over the real nodes
    of each graph), token-specific singular values :math:`\mathbf{S} = \sigma(\mathbf{X}\mathbf{W}_\Sigma)` and
    Jacobi polynomials :math:`P_k^{(a,b)}` (Eqs. 6, 9); :math:`\theta_0 = 1` is fixed, :math:`\theta_k =
    \tanh(\tilde\theta_k)` with :math:`\tilde\theta_k = 0` at init, so the layer starts as efficient attention. No
    :math:`N \times N` matrix is formed, so an additive attention bias is refused (:class:`ValueError`). The
    filter's core (softmaxes, polynomial, products) runs in float32 under autocast, and any :math:`a, b` whose
    recurrence is defined are taken (orthogonality needs :math:`a, b > -1`; the authors' best scripts use
    :math:`b = -1`, agf-notes B4).

    The orthogonality regulariser (Eq. 11, as the authors' code) is computed in training mode, per graph:

    .. math::
        L_{ortho} = \mathrm{mean}\,|\mathbf{U}^\top\mathbf{U} - \mathbf{I}| +
            \mathrm{mean}\,|\mathbf{V}^\top\mathbf{V} - \mathbf{I}|,

    averaged over the batch's graphs; :meth:`aux_loss` returns it times :math:`\gamma` = :obj:`ortho_weight` (Eq. 12;
    0 in eval mode). Add the mean over layers to the task loss. Choices and notes: ``docs/fidelity.md``.

    Args:
        channels (int): Size of each input and output node feature :math:`C`.
        heads (int): Number of heads :math:`H`.
        K (int, optional): Polynomial order. (default: :obj:`3`)
        a (float, optional): Jacobi :math:`a`. (default: :obj:`1.0`)
        b (float, optional): Jacobi :math:`b`. (default: :obj:`1.0`)
        ortho_weight (float, optional): :math:`\gamma` applied by :meth:`aux_loss`. (default: :obj:`1e-2`)
        dropout (float, optional): Dropout on :math:`\mathbf{U}\odot g`. (default: :obj:`0.0`)
        bias (bool, optional): Bias in the projections. (default: :obj:`True`)
        impl (str, optional): How a packed call runs: :obj:`"auto"`, :obj:`"grouped"` or :obj:`"dense"` (see
            :class:`~gea_graph.nn.attention.multihead.DenseAttentionBase`). (default: :obj:`"auto"`)

    Shapes:
        - **input:** :math:`(B, N, C)` and mask :math:`(B, N)` bool; or packed :math:`(\sum N_i, C)` and a plan
        - **output:** :math:`(B, N, C)`, padded rows zero; or :math:`(\sum N_i, C)`
    """

    def __init__(self, channels: int, heads: int, K: int = 3, a: float = 1.0, b: float = 1.0,
                 ortho_weight: float = 1e-2, dropout: float = 0.0, bias: bool = True,
                 impl: str = "auto") -> None:
        super().__init__()
        if channels % heads != 0:
            raise ValueError(f"'channels' ({channels}) must be divisible by 'heads' ({heads})")
        #: How a packed call runs: ``"dense"`` (one padded block), ``"grouped"`` (blocks of graphs of
        #: similar size) or ``"auto"`` (grouped on CPU, dense on a GPU).
        self.impl = check_impl(impl)
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

    def forward(self, x: Tensor, mask: Tensor | AttentionPlan, attn_bias: Tensor | None = None,
                return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        r"""Dense ``(x [B, N, C], mask [B, N])`` or packed ``(x [sum N_i, C], plan)`` (the core runs
        on the plan's blocks of graphs of similar size, or on one padded block with
        ``impl="dense"``), as every global attention (see
        :meth:`~gea_graph.nn.attention.multihead.DenseAttentionBase.forward`)."""
        if attn_bias is not None or (isinstance(mask, AttentionPlan) and mask.has_bias):
            raise ValueError("AGFAttention has no N x N score matrix, so it cannot apply an "
                             "additive 'attn_bias'; pass attn_bias=None (structure must enter "
                             "through node features) or use another attention")
        H, D = self.heads, self.head_dim
        if isinstance(mask, AttentionPlan):
            N = x.size(0)
            grouped = self.impl == "grouped" or (self.impl == "auto" and mask.blocks_by_default)
            layout = mask.layout(grouped and not return_attention)
            proj = self.proj(x).view(N, 4, H, D)
            outs, total, graphs, attn = [], None, None, None
            for blk, dense in zip(layout.blocks, layout.gather(proj)):
                out, gate, vt, ortho = self._core(dense.permute(2, 0, 3, 1, 4), blk.mask)
                outs.append(out.transpose(1, 2))  # [g, L, H, D]
                if ortho is not None:
                    total = ortho[0] if total is None else total + ortho[0]
                    graphs = ortho[1] if graphs is None else graphs + ortho[1]
                if return_attention:
                    attn = self._implied(gate, vt, blk.mask)
            self._ortho = None if total is None else total / graphs.clamp(min=1.0)
            if self.training and self._ortho is None:
                self._ortho = self.theta.new_zeros(())
            out = layout.scatter(outs) if outs else proj.new_zeros(N, H, D)
            out = self.out(out.reshape(N, H * D).to(x.dtype))
            return (out, attn) if return_attention else out
        B, N, _ = x.shape
        proj = self.proj(x).view(B, N, 4, H, D).permute(2, 0, 3, 1, 4)  # [4, B, H, N, D]
        out, gate, vt, ortho = self._core(proj, mask)
        self._ortho = None if ortho is None else ortho[0] / ortho[1].clamp(min=1.0)
        out = self.out(merge_heads(out).to(x.dtype))
        out = out.masked_fill(~mask[..., None], 0.0)
        if return_attention:
            return out, self._implied(gate, vt, mask)
        return out

    def _core(self, proj: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor, tuple[Tensor, Tensor] | None]:
        # proj [4, B, H, N, D] -> (out [B, H, N, D], gate, vt, (sum of per-graph ortho, real graphs) in training)
        x_dtype = proj.dtype
        dtype = x_dtype if x_dtype == torch.float64 else torch.float32
        with torch.autocast(proj.device.type, enabled=False):
            proj = proj.to(dtype)
            u = torch.softmax(proj[0], dim=-1)
            # Node softmax over the real nodes of each graph; finfo.min (not -inf) keeps an empty
            # batch slot finite. Padded nodes get exactly 0 weight otherwise.
            keep = mask[:, None, :, None]
            vt = torch.softmax(proj[1].masked_fill(~keep, torch.finfo(dtype).min), dim=-2)
            kv = torch.matmul(vt.transpose(-1, -2), proj[2])  # [B, H, D, D]: linear in N
            gate = u * self.filter(torch.sigmoid(proj[3]))
            gate_d = F.dropout(gate, self.dropout, self.training)
            out = torch.matmul(gate_d, kv)  # [B, H, N, D]
            ortho = self._ortho_loss(u, vt, mask) if self.training else None
        return out, gate, vt, ortho

    @staticmethod
    def _implied(gate: Tensor, vt: Tensor, mask: Tensor) -> Tensor:
        # The implied H = (U * g) V^T, [B, H, N, N], zero on padded rows and columns (pictures only)
        attn = torch.matmul(gate, vt.transpose(-1, -2))
        return attn.masked_fill(~mask[:, None, :, None], 0.0)

    def _ortho_loss(self, u: Tensor, vt: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        # (sum over the graphs with a real node of their L_ortho, number of such graphs); no host sync
        um = u * mask[:, None, :, None].to(u.dtype)
        eye = torch.eye(self.head_dim, dtype=u.dtype, device=u.device)
        gu = torch.matmul(um.transpose(-1, -2), um)
        gv = torch.matmul(vt.transpose(-1, -2), vt)
        per_graph = (gu - eye).abs().mean((1, 2, 3)) + (gv - eye).abs().mean((1, 2, 3))
        real = mask.any(-1).to(per_graph.dtype)
        return (per_graph * real).sum(), real.sum()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, K={self.K}, "
                f"a={self.a:g}, b={self.b:g}, ortho_weight={self.ortho_weight:g})")
