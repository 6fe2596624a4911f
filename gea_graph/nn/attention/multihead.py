r"""Multi-head softmax attention on dense, padded graph batches (the reference global attention)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Module

from .dense import merge_heads


class DenseAttentionBase(Module):
    r"""Shared plumbing of the dense global attentions: a fused ``q, k, v`` projection, an output
    projection, the padding mask and the ``store_attention`` switch. Subclasses implement
    :meth:`attend`.
    """

    def __init__(self, channels: int, heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if channels % heads != 0:
            raise ValueError(f"'channels' ({channels}) must be divisible by 'heads' ({heads})")
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
        B, N = mask.shape
        neg = torch.finfo(dtype).min
        if attn_bias is None:
            return torch.zeros(B, 1, 1, N, dtype=dtype, device=mask.device).masked_fill_(
                ~mask[:, None, None, :], neg)
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

    def _softmax_weights(self, q: Tensor, k: Tensor, bias: Tensor) -> Tensor:
        # Explicit A = softmax(q k^T / sqrt(d) + bias), [B, H, N, N].
        B, H, N, D = q.shape
        if bias.shape == (B, H, N, N):  # fuse the bias add into the batched matmul
            scores = torch.baddbmm(bias.reshape(B * H, N, N), q.reshape(B * H, N, D),
                                   k.reshape(B * H, N, D).transpose(1, 2), alpha=self.scale)
            return torch.softmax(scores, dim=-1).view(B, H, N, N)
        scores = torch.matmul(q, k.transpose(-1, -2)).mul_(self.scale) + bias
        return torch.softmax(scores, dim=-1)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor,
               need_weights: bool) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError

    def forward(self, x: Tensor, mask: Tensor, attn_bias: Tensor | None = None,
                return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        r"""
        Args:
            x (torch.Tensor): dense node features :math:`[B, N, C]`.
            mask (torch.Tensor): :math:`[B, N]` bool, ``True`` on real nodes.
            attn_bias (torch.Tensor, optional): additive pre-softmax bias :math:`[B, H, N, N]`
                (or broadcastable, e.g. :math:`[B, 1, N, N]`). Its entries at padded keys are
                ignored. (default: :obj:`None`)
            return_attention (bool, optional): also return the attention weights
                :math:`[B, H, N, N]` (zero on padded rows and columns). (default: :obj:`False`)
        """
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

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"dropout={self.dropout})")


class MultiheadAttention(DenseAttentionBase):
    r"""Multi-head scaled dot-product attention with an additive bias, on a dense padded batch of
    graphs (Vaswani et al., `"Attention Is All You Need" <https://arxiv.org/abs/1706.03762>`_,
    Eq. 1; with the structural bias of Ying et al., `"Do Transformers Really Perform Bad for Graph
    Representation?" <https://arxiv.org/abs/2106.05234>`_, Eq. 6)

    .. math::
        \mathbf{A}^{(h)} = \mathrm{softmax}\!\left(
            \frac{\mathbf{Q}^{(h)} {\mathbf{K}^{(h)}}^{\top}}{\sqrt{d_h}} + \mathbf{B}^{(h)}
            + \mathbf{M}\right), \qquad
        \mathrm{MHA}(\mathbf{X}) = \big\Vert_{h=1}^{H} \mathbf{A}^{(h)} \mathbf{V}^{(h)}\,
        \mathbf{W}_O

    where :math:`\mathbf{B}^{(h)}` is the optional :obj:`attn_bias` and :math:`\mathbf{M}` masks
    padded keys. It runs :func:`torch.nn.functional.scaled_dot_product_attention` (fused kernels);
    attention dropout is applied to :math:`\mathbf{A}` inside that call.

    Attention maps: call ``forward(..., return_attention=True)`` to get ``(out, attn)`` with
    ``attn`` of shape :math:`[B, H, N, N]`, or set ``module.store_attention = True`` and read
    ``module.attention`` after a forward (works when the module sits deep inside a model). Both take
    an explicit, slower path that yields the same output.

    Args:
        channels (int): Size of each input and output node feature :math:`C`.
        heads (int): Number of heads :math:`H` (must divide :obj:`channels`).
        dropout (float, optional): Attention dropout probability. (default: :obj:`0.0`)
        bias (bool, optional): Bias in the projections. (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(B, N, C)`, mask :math:`(B, N)` bool, optional bias
          :math:`(B, H, N, N)`
        - **output:** :math:`(B, N, C)`; rows of padded nodes are zero. A graph's output does not
          depend on its padding or its batch-mates.
    """

    def attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor,
               need_weights: bool) -> tuple[Tensor, Tensor | None]:
        p = self.dropout if self.training else 0.0
        if not need_weights:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p), None
        attn = self._softmax_weights(q, k, bias)
        return torch.matmul(F.dropout(attn, p, self.training), v), attn
