r"""Multi-head softmax attention on graph batches (the reference global attention)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Module

from .dense import key_padding_bias, merge_heads
from .plan import AttentionPlan, check_impl


class DenseAttentionBase(Module):
    r"""Shared plumbing of the global attentions with a score matrix: a fused ``q, k, v`` projection,
    an output projection, the padding mask, the ``store_attention`` switch and the two calling forms
    (dense ``(x, mask, attn_bias)`` and packed ``(x, plan)``, see :meth:`forward`). Subclasses
    implement :meth:`attend`.

    :obj:`impl` (``"auto"``, ``"grouped"``, ``"dense"``; :attr:`impl` may be changed at any time) chooses how a
    packed call runs: ``"grouped"`` on the plan's blocks of graphs of similar size, ``"dense"`` on one block of the
    whole padded batch (the reference), ``"auto"``: grouped on CPU, dense elsewhere (:meth:`resolve_impl`). Both
    compute the same function.
    """

    def __init__(self, channels: int, heads: int, dropout: float = 0.0, bias: bool = True,
                 impl: str = "auto") -> None:
        super().__init__()
        if channels % heads != 0:
            raise ValueError(f"'channels' ({channels}) must be divisible by 'heads' ({heads})")
        self.impl = check_impl(impl)
        self.channels = channels
        self.heads = heads
        self.head_dim = channels // heads
        self.dropout = float(dropout)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = Linear(channels, 3 * channels, bias=bias)
        self.out = Linear(channels, channels, bias=bias)
        #: When ``True``, every forward keeps the (detached) attention weights ``[B, H, N, N]`` in
        #: :attr:`attention` (for pictures); this switches to the explicit, slower path.
        self.store_attention = False
        self.attention: Tensor | None = None

    def reset_parameters(self) -> None:
        self.qkv.reset_parameters()
        self.out.reset_parameters()
        self.attention = None

    # ------------------------------------------------------------------------------------------
    def _mask_bias(self, mask: Tensor, attn_bias: Tensor | None, dtype: torch.dtype) -> Tensor:
        # Padded keys get the most negative *finite* value (not -inf): a batch slot without any real
        # node then yields a uniform, finite row instead of NaN. masked_fill (not +) so that an
        # attn_bias that is itself -inf or very negative cannot overflow.
        if attn_bias is None:
            return key_padding_bias(mask, dtype)
        N = mask.size(1)
        neg = torch.finfo(dtype).min
        if attn_bias.dim() != 4 or attn_bias.size(-1) != N or attn_bias.size(-2) != N:
            raise ValueError(f"'attn_bias' must have shape [B, H, N, N] with N={N}, "
                             f"got {tuple(attn_bias.shape)}")
        return attn_bias.to(dtype).masked_fill(~mask[:, None, None, :], neg)

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, N, _ = x.shape
        qkv = self.qkv(x).view(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        # unbind, not qkv[0], qkv[1], qkv[2]: its backward stacks the three gradients in one copy
        # instead of zero-filling three full-size buffers (SelectBackward).
        q, k, v = qkv.unbind(0)
        return q, k, v

    def _softmax_weights(self, q: Tensor, k: Tensor, bias: Tensor | None) -> Tensor:
        # Explicit A = softmax(q k^T / sqrt(d) + bias), [B, H, N, N].
        B, H, N, D = q.shape
        if bias is not None and bias.shape == (B, H, N, N):  # fuse the bias add into the matmul
            scores = torch.baddbmm(bias.reshape(B * H, N, N), q.reshape(B * H, N, D),
                                   k.reshape(B * H, N, D).transpose(1, 2), alpha=self.scale)
            return torch.softmax(scores, dim=-1).view(B, H, N, N)
        scores = torch.matmul(q, k.transpose(-1, -2)).mul_(self.scale)
        return torch.softmax(scores if bias is None else scores + bias, dim=-1)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
               need_weights: bool) -> tuple[Tensor, Tensor | None]:
        r"""The attention core on dense blocks: ``q, k, v`` :math:`[B, H, N, D]` and the additive
        bias (padded keys already masked; broadcastable to :math:`[B, H, N, N]`, or ``None``) ->
        ``(out [B, H, N, D], weights [B, H, N, N] if need_weights else None)``."""
        raise NotImplementedError

    def resolve_impl(self, plan: AttentionPlan, need_weights: bool = False) -> str:
        r"""The layout a packed call with ``plan`` runs on: :attr:`impl`, with ``"auto"`` resolved to
        ``"grouped"`` on CPU (which pays for every padded entry) and ``"dense"`` elsewhere (a GPU pays per kernel
        launch, not per padded entry); ``"dense"`` whenever the weights are asked for (their :math:`[B, H, N, N]`
        layout)."""
        if need_weights:
            return "dense"
        if self.impl == "auto":
            return "grouped" if plan.blocks_by_default else "dense"
        return self.impl

    def forward(self, x: Tensor, mask: Tensor | AttentionPlan, attn_bias: Tensor | None = None,
                return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor | None]:
        r"""Two forms, one function:

        * **dense:** ``attn(x [B, N, C], mask [B, N], attn_bias=None) -> [B, N, C]``, padded rows
          zero;
        * **packed:** ``attn(x [sum N_i, C], plan) -> [sum N_i, C]`` with an
          :class:`~gea_graph.nn.attention.plan.AttentionPlan` of the batch (its bias, if any,
          given by :meth:`AttentionPlan.with_bias`), run as :meth:`resolve_impl` says.

        Args:
            x (torch.Tensor): node features, dense :math:`[B, N, C]` or packed
                :math:`[\sum N_i, C]`.
            mask (torch.Tensor or AttentionPlan): :math:`[B, N]` bool, ``True`` on real nodes; or
                the plan of a packed batch.
            attn_bias (torch.Tensor, optional): dense form only: additive pre-softmax bias
                :math:`[B, H, N, N]` (or broadcastable, e.g. :math:`[B, 1, N, N]`). Its entries at
                padded keys are ignored. (default: :obj:`None`)
            return_attention (bool, optional): also return the attention weights
                :math:`[B, H, N, N]` (zero on padded rows and columns; for a packed call in the
                layout of :func:`~gea_graph.nn.attention.to_dense`). (default: :obj:`False`)
        """
        if isinstance(mask, AttentionPlan):
            if attn_bias is not None:
                raise ValueError(f"{type(self).__name__}: with a plan, give the bias with "
                                 "plan.with_bias(...), not attn_bias")
            return self._forward_plan(x, mask, return_attention)
        q, k, v = self._qkv(x)
        bias = self._mask_bias(mask, attn_bias, q.dtype)
        need = return_attention or self.store_attention
        out, attn = self.attend(q, k, v, bias, need)
        out = self.out(merge_heads(out))
        # Padded rows are exactly zero (and a NaN there could never leak through a multiplication).
        out = out.masked_fill(~mask[..., None], 0.0)
        if attn is not None:
            attn = attn.masked_fill(~mask[:, None, :, None], 0.0)
            if self.store_attention:
                self.attention = attn.detach()
        if return_attention:
            return out, attn
        return out

    def _forward_plan(self, x: Tensor, plan: AttentionPlan,
                      return_attention: bool) -> Tensor | tuple[Tensor, Tensor | None]:
        N = x.size(0)
        H, D = self.heads, self.head_dim
        need = return_attention or self.store_attention
        qkv = self.qkv(x).view(N, 3, H, D)
        layout = plan.layout(self.resolve_impl(plan, need) == "grouped")
        attn, outs = None, []
        for blk, dense, bias in zip(layout.blocks, layout.gather(qkv), plan.block_bias(layout, qkv.dtype)):
            q, k, v = dense.permute(2, 0, 3, 1, 4).unbind(0)  # [g, H, L, D] each
            o, weights = self.attend(q, k, v, bias, need)
            outs.append(o.transpose(1, 2))  # [g, L, H, D]
            if weights is not None:
                attn = weights.masked_fill(blk.padding[:, None, :, None], 0.0)
        out = layout.scatter(outs) if outs else qkv.new_zeros(N, H, D)
        out = self.out(out.reshape(N, H * D))
        if need:
            if self.store_attention and attn is not None:
                self.attention = attn.detach()
            if return_attention:
                return out, attn
        return out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"dropout={self.dropout}, impl={self.impl!r})")


class MultiheadAttention(DenseAttentionBase):
    r"""Multi-head scaled dot-product attention with an additive bias, on a batch of graphs, packed
    or padded (Vaswani et al., `"Attention Is All You Need" <https://arxiv.org/abs/1706.03762>`_,
    Eq. 1; with the structural bias of Ying et al., `"Do Transformers Really Perform Bad for Graph
    Representation?" <https://arxiv.org/abs/2106.05234>`_, Eq. 6)

    .. math::
        \mathbf{A}^{(h)} = \mathrm{softmax}\!\left(
            \frac{\mathbf{Q}^{(h)} {\mathbf{K}^{(h)}}^{\top}}{\sqrt{d_h}} + \mathbf{B}^{(h)}
            + \mathbf{M}\right), \qquad
        \mathrm{MHA}(\mathbf{X}) = \big\Vert_{h=1}^{H} \mathbf{A}^{(h)} \mathbf{V}^{(h)}\,
        \mathbf{W}_O

    where :math:`\mathbf{B}^{(h)}` is the optional :obj:`attn_bias` and :math:`\mathbf{M}` masks
    padded keys. Attention dropout is applied to :math:`\mathbf{A}`.

    It runs :func:`torch.nn.functional.scaled_dot_product_attention` with the padding mask, on the padded batch
    (dense form) or, called packed, ``attn(x [sum N_i, C], plan)``, on the plan's blocks (see
    :meth:`DenseAttentionBase.forward`).

    Attention maps: call ``forward(..., return_attention=True)`` to get ``(out, attn)`` with
    ``attn`` of shape :math:`[B, H, N, N]`, or set ``module.store_attention = True`` and read
    ``module.attention`` after a forward (works when the module sits deep inside a model). Both take
    an explicit, slower path (dense) that yields the same output.

    Args:
        channels (int): Size of each input and output node feature :math:`C`.
        heads (int): Number of heads :math:`H` (must divide :obj:`channels`).
        dropout (float, optional): Attention dropout probability. (default: :obj:`0.0`)
        bias (bool, optional): Bias in the projections. (default: :obj:`True`)
        impl (str, optional): How a packed call runs: ``"auto"``, ``"grouped"`` or ``"dense"`` (see
            :class:`DenseAttentionBase`). (default: :obj:`"auto"`)

    Shapes:
        - **input:** node features :math:`(B, N, C)`, mask :math:`(B, N)` bool, optional bias
          :math:`(B, H, N, N)`; or packed :math:`(\sum N_i, C)` and a plan
        - **output:** :math:`(B, N, C)`, rows of padded nodes zero; or :math:`(\sum N_i, C)`. A
          graph's output does not depend on its padding or its batch-mates.
    """

    def attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
               need_weights: bool) -> tuple[Tensor, Tensor | None]:
        p = self.dropout if self.training else 0.0
        if not need_weights:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p), None
        attn = self._softmax_weights(q, k, bias)
        return torch.matmul(F.dropout(attn, p, self.training), v), attn
