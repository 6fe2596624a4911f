r"""Encoders of the positional encodings of the data schema (``lap_eigvec`` / ``lap_eigval`` /
``lap_mask`` and ``rw_pe``), joined to the node features by concatenation or addition."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Module, Sequential
from torch_geometric.nn.inits import reset
from torch_geometric.nn.resolver import activation_resolver
from torch_geometric.typing import OptTensor

from gea_graph.nn.norm import spans_processes

MODES = ("concat", "add")
LAP_MODELS = ("deepset", "linear")
SIGN_SCOPES = ("graph", "batch")

def _batch_norm(bn: torch.nn.BatchNorm1d, h: Tensor, training: bool) -> Tensor:
    # one row: use the running statistics (not when the norm spans a DDP run's processes: all of them must
    # take part in gathering its statistics)
    if training and h.size(0) <= 1 and not spans_processes(bn):
        return F.batch_norm(h, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0,
                            bn.eps)
    return bn(h)


class NarrowLinear(Linear):
    r"""A :class:`~torch.nn.Linear` (same parameters and result) for inputs with very few features, e.g. the
    :math:`[\mathbf{v}_j[i], \lambda_j]` pairs of the LapPE DeepSet: ``Linear(2, 32)`` over
    :math:`N k` rows.

    ``F.linear``'s backward forms the weight gradient as :math:`G^{\top} X`, a
    :math:`[d_{out}, Nk] \times [Nk, d_{in}]` product, which CPU BLAS runs slowly for a tiny :math:`d_{in}`.
    Written as ``addmm`` with a contiguous :math:`\mathbf{W}^{\top}`, autograd forms the transposed product
    :math:`X^{\top} G` instead (the same gradient)."""

    def forward(self, input: Tensor) -> Tensor:
        r"""``[..., in_features] -> [..., out_features]``."""
        x = input.reshape(-1, self.in_features)
        weight_t = self.weight.t().contiguous()  # makes autograd form the weight gradient as X^T G
        out = torch.mm(x, weight_t) if self.bias is None else torch.addmm(self.bias, x, weight_t)
        return out.view(*input.shape[:-1], self.out_features)


class _PEJoin(Module):
    r"""Shared handling of the node features: optional input map and concat / add."""

    def __init__(self, dim_pe: int, in_channels: int | None, out_channels: int | None,
                 mode: str) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"'mode' must be one of {MODES}, got {mode!r}")
        if in_channels is not None:
            if out_channels is None:
                raise ValueError("'out_channels' is needed with 'in_channels'")
            width = out_channels - dim_pe if mode == "concat" else out_channels
            if width <= 0:
                raise ValueError(f"'out_channels' ({out_channels}) must exceed 'dim_pe' ({dim_pe})")
            self.lin_x: Linear | None = Linear(in_channels, width)
        else:
            self.lin_x = None
        self.dim_pe = dim_pe
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.mode = mode

    def _join(self, x: OptTensor, pe: Tensor) -> Tensor:
        if x is None:
            return pe
        if self.lin_x is not None:
            x = self.lin_x(x)
        if self.mode == "concat":
            return torch.cat([x, pe.to(x.dtype)], dim=-1)
        if x.size(-1) != pe.size(-1):
            raise ValueError(f"mode='add' needs node features of width dim_pe={pe.size(-1)}, "
                             f"got {x.size(-1)}")
        return x + pe.to(x.dtype)


class LapPEEncoder(_PEJoin):
    r"""Laplacian-eigenvector positional encoding as in GraphGPS (`"Recipe for a General, Powerful, Scalable Graph
    Transformer" <https://arxiv.org/abs/2205.12454>`_), the LapPE of the GEAET paper (Eq. 7). For node :math:`i`
    with eigenpairs :math:`(\mathbf{v}_j[i], \lambda_j)`, :math:`j = 1..k`, and mask :math:`m_{ij}` (padding of
    graphs with fewer than :math:`k` pairs; NaN entries are masked too):

    .. math::
        \mathbf{p}_i = \sum_{j=1}^{k} m_{ij}\, \phi\big(\mathbf{W}_A\,
        [s_j \mathbf{v}_j[i], \lambda_j] + \mathbf{b}_A\big) \qquad \text{(DeepSet)}

    with :math:`\phi` the rest of the MLP (GraphGPS's DeepSet: hidden width :math:`2\cdot\text{dim\_pe}`, an
    activation after every layer) and :math:`s_j \in \{\pm 1\}` a random sign per eigenvector in training
    (eigenvectors are defined up to sign; none in evaluation): one per graph and eigenvector with
    :obj:`sign_scope="graph"` and :obj:`batch` given, else one per eigenvector for the batch (GraphGPS).
    :obj:`model="linear"` is one ``Linear(2k, dim_pe)`` on the masked, sign-flipped ``[v_1..v_k, λ_1..λ_k]``. The
    output is ``concat(x, p)`` (:obj:`mode="concat"`, the authors' code) or ``x + p`` (:obj:`"add"`, the paper);
    with :obj:`in_channels` and :obj:`out_channels` a ``Linear`` first maps ``x`` to the width left for it;
    ``x=None`` returns ``p``. :obj:`pe` is ``lap_eigvec`` (then ``eigval``, ``mask`` follow) or the tuple
    ``(lap_eigvec, lap_eigval, lap_mask)``. Notes: ``docs/fidelity.md``.

    Args:
        dim_pe (int): Output size of the encoding.
        model (str, optional): :obj:`"deepset"` or :obj:`"linear"`. (default: :obj:`"deepset"`)
        num_layers (int, optional): Layers of the DeepSet MLP. (default: :obj:`2`)
        k (int, optional): Number of eigenpairs (for :obj:`"linear"` and :obj:`raw_norm`). (default: :obj:`None`)
        in_channels (int, optional): Input node feature size for the internal map. (default: :obj:`None`)
        out_channels (int, optional): Output size with the internal map. (default: :obj:`None`)
        mode (str, optional): :obj:`"concat"` or :obj:`"add"`. (default: :obj:`"concat"`)
        act (str, optional): Activation. (default: :obj:`"relu"`)
        raw_norm (bool, optional): ``BatchNorm1d(k)`` on the raw pairs (GraphGPS option). (default: :obj:`False`)
        sign_flip (bool, optional): Random sign flips in training. (default: :obj:`True`)
        sign_scope (str, optional): :obj:`"graph"` or :obj:`"batch"` (the authors'). (default: :obj:`"graph"`)

    Shapes:
        - **input:** node features :math:`(N, F)` or :obj:`None`, eigenvectors :math:`(N, k)`,
          eigenvalues :math:`(N, k)`, mask :math:`(N, k)` bool, batch :math:`(N)`
        - **output:** :math:`(N, F + \text{dim\_pe})` (concat) or :math:`(N, F)` (add)
    """

    def __init__(self, dim_pe: int, model: str = "deepset", num_layers: int = 2,
                 k: int | None = None, in_channels: int | None = None,
                 out_channels: int | None = None, mode: str = "concat",
                 act: str | Any = "relu", raw_norm: bool = False,
                 sign_flip: bool = True, sign_scope: str = "graph") -> None:
        super().__init__(dim_pe, in_channels, out_channels, mode)
        if sign_scope not in SIGN_SCOPES:
            raise ValueError(f"'sign_scope' must be one of {SIGN_SCOPES}, got {sign_scope!r}")
        if model not in LAP_MODELS:
            raise ValueError(f"'model' must be one of {LAP_MODELS}, got {model!r}")
        if (model == "linear" or raw_norm) and k is None:
            raise ValueError("'k' is needed with model='linear' or raw_norm=True")
        if num_layers < 1:
            raise ValueError("'num_layers' must be >= 1")
        self.model = model
        self.num_layers = num_layers
        self.k = k
        self.sign_flip = sign_flip
        self.sign_scope = sign_scope
        self.raw_norm = torch.nn.BatchNorm1d(k) if raw_norm and k is not None else None
        if model == "deepset":
            layers: list = []
            if num_layers == 1:
                layers += [NarrowLinear(2, dim_pe), activation_resolver(act)]
            else:
                layers += [NarrowLinear(2, 2 * dim_pe), activation_resolver(act)]
                for _ in range(num_layers - 2):
                    layers += [Linear(2 * dim_pe, 2 * dim_pe), activation_resolver(act)]
                layers += [Linear(2 * dim_pe, dim_pe), activation_resolver(act)]
            self.encoder = Sequential(*layers)
        else:
            self.encoder = Linear(2 * k, dim_pe)  # type: ignore[operator]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        reset(self.encoder)
        if self.raw_norm is not None:
            self.raw_norm.reset_parameters()
        if self.lin_x is not None:
            self.lin_x.reset_parameters()

    def forward(self, x: OptTensor, pe: Tensor | Sequence[Tensor],
                eigval: OptTensor = None, mask: OptTensor = None,
                batch: OptTensor = None, num_graphs: int | None = None) -> Tensor:
        r"""Runs the forward pass of the module (see the class doc for the arguments;
        :obj:`num_graphs`, the number of graphs of :obj:`batch`, is read from it with a host sync
        when not given)."""
        if not isinstance(pe, Tensor):
            parts = tuple(pe)
            eigvec = parts[0]
            eigval = parts[1] if len(parts) > 1 else eigval
            mask = parts[2] if len(parts) > 2 else mask
        else:
            eigvec = pe
        if eigval is None:
            raise ValueError("LapPEEncoder needs the eigenvalues ('lap_eigval')")
        if eigval.dim() == 3:
            eigval = eigval.squeeze(-1)
        dtype = self.encoder_dtype()
        eigvec, eigval = eigvec.to(dtype), eigval.to(dtype)
        valid = ~(torch.isnan(eigvec) | torch.isnan(eigval))
        if mask is not None:
            valid = valid & mask.bool()
        zero = eigvec.new_zeros(())
        eigvec = torch.where(valid, eigvec, zero)
        eigval = torch.where(valid, eigval, zero)
        if self.training and self.sign_flip:
            k = eigvec.size(1)
            if batch is None or self.sign_scope == "batch":
                sign = torch.randint(0, 2, (1, k), device=eigvec.device).to(dtype) * 2 - 1
            else:
                if num_graphs is None:
                    num_graphs = int(batch.max()) + 1 if batch.numel() > 0 else 0
                sign = torch.randint(0, 2, (num_graphs, k), device=eigvec.device).to(dtype)
                sign = (sign * 2 - 1).index_select(0, batch)
            eigvec = eigvec * sign
        raw = torch.stack([eigvec, eigval], dim=-1)  # [N, k, 2]
        if self.raw_norm is not None:  # BatchNorm1d(k) on [N, k, 2]: per eigenvector index
            raw = _batch_norm(self.raw_norm, raw, self.training)
            raw = torch.where(valid.unsqueeze(-1), raw, zero)
        if self.model == "deepset":
            p = self.encoder(raw)  # [N, k, dim_pe]
            p = (p * valid.unsqueeze(-1).to(p.dtype)).sum(dim=1)
        else:
            p = self.encoder(torch.cat([raw[..., 0], raw[..., 1]], dim=-1))
        return self._join(x, p)

    def encoder_dtype(self) -> torch.dtype:
        r"""The parameter dtype (the inputs are cast to it)."""
        return next(self.encoder.parameters()).dtype

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(dim_pe={self.dim_pe}, model={self.model!r}, "
                f"num_layers={self.num_layers}, mode={self.mode!r}, "
                f"sign_flip={self.sign_flip}, sign_scope={self.sign_scope!r})")


class RWPEEncoder(_PEJoin):
    r"""Random-walk positional (structural) encoding as in GraphGPS's RWSE, the PE of the GEAET
    PATTERN runs (geaet-notes §2.2): optional ``BatchNorm1d(L)`` on the raw return probabilities,
    then ``Linear(L, dim_pe)``:

    .. math::
        \mathbf{p}_i = \mathbf{W}\,\mathrm{BN}\big([P_{ii}, (P^2)_{ii}, \dots,
        (P^L)_{ii}]\big) + \mathbf{b}

    joined to the node features like :class:`LapPEEncoder` (:obj:`mode`, :obj:`in_channels`,
    :obj:`out_channels`). With ``walk_length=16, dim_pe=7`` and the norm it has 151 parameters
    (plus ``Linear(3, 57)`` = 228 for PATTERN's 3-dim inputs at :math:`d = 64`: 379, the paper's
    encoder count). Forward: ``forward(x, pe)`` with :obj:`pe` the schema's ``rw_pe``
    :math:`[N, L]`.

    Args:
        walk_length (int): :math:`L`.
        dim_pe (int): Output size of the encoding.
        norm (bool, optional): ``BatchNorm1d(L)`` first. (default: :obj:`True`)
        in_channels (int, optional): Input node feature size for the internal map.
            (default: :obj:`None`)
        out_channels (int, optional): Output size with the internal map. (default: :obj:`None`)
        mode (str, optional): :obj:`"concat"` or :obj:`"add"`. (default: :obj:`"concat"`)

    Shapes:
        - **input:** node features :math:`(N, F)` or :obj:`None`, random-walk PE :math:`(N, L)`
        - **output:** :math:`(N, F + \text{dim\_pe})` (concat) or :math:`(N, F)` (add)
    """

    def __init__(self, walk_length: int, dim_pe: int, norm: bool = True,
                 in_channels: int | None = None, out_channels: int | None = None,
                 mode: str = "concat") -> None:
        super().__init__(dim_pe, in_channels, out_channels, mode)
        self.walk_length = walk_length
        self.norm = torch.nn.BatchNorm1d(walk_length) if norm else None
        self.lin = Linear(walk_length, dim_pe)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        self.lin.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()
        if self.lin_x is not None:
            self.lin_x.reset_parameters()

    def forward(self, x: OptTensor, pe: Tensor) -> Tensor:
        r"""Runs the forward pass of the module."""
        pe = pe.to(self.lin.weight.dtype)
        if self.norm is not None:
            pe = _batch_norm(self.norm, pe, self.training)
        return self._join(x, self.lin(pe))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(walk_length={self.walk_length}, "
                f"dim_pe={self.dim_pe}, norm={self.norm is not None}, mode={self.mode!r})")
