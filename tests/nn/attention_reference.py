"""Naive dense references of the global attentions, written from the equations (loops over graphs and heads)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from gea_graph.nn.attention import to_dense


def dense_batch(sizes=(3, 5, 1), C=8, seed=0, dtype=torch.float64):
    """A padded ``[B, N, C]`` batch of random node features and its mask."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), C, generator=g, dtype=dtype)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return to_dense(x, batch)


def naive_attention(mod, x, mask, bias=None, mix: Callable | None = None):
    """Per graph and head: ``Abar = softmax(q k^T / sqrt(D) + bias)`` on the real nodes, the head output
    ``mix(Abar, v, h)`` (default ``Abar v``), heads concatenated and mapped by ``W_O``."""
    B, _, C = x.shape
    H, D = mod.heads, C // mod.heads
    out = torch.zeros_like(x)
    for b in range(B):
        n = int(mask[b].sum())
        qkv = x[b, :n] @ mod.qkv.weight.T + mod.qkv.bias
        q, k, v = qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]
        heads = []
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            s = q[:, sl] @ k[:, sl].T / math.sqrt(D)
            if bias is not None:
                s = s + bias[b, h, :n, :n]
            A = torch.softmax(s, -1)
            heads.append(A @ v[:, sl] if mix is None else mix(A, v[:, sl], h))
        out[b, :n] = torch.cat(heads, -1) @ mod.out.weight.T + mod.out.bias
    return out


def hand_weights(mod):
    """Sets a one-head, two-channel attention (``qkv``, ``out``) to the hand-sized example of the tests: no biases,
    ``W_K = W_V = W_O = I`` and ``W_Q = sqrt(2) ln 3 I``, so that for ``x_0 = e_0``, ``x_1 = e_1`` the scores
    ``q_i k_j / sqrt(2)`` are ``ln 3`` on the diagonal and 0 off it, and the softmax matrix is
    ``A = [[3/4, 1/4], [1/4, 3/4]]`` (``HAND_A``); the values are ``v = x``. Returns ``mod``."""
    eye = torch.eye(2, dtype=mod.qkv.weight.dtype)
    with torch.no_grad():
        mod.qkv.weight.copy_(torch.cat([math.sqrt(2.0) * math.log(3.0) * eye, eye, eye]))
        mod.qkv.bias.zero_()
        mod.out.weight.copy_(eye)
        mod.out.bias.zero_()
    return mod


HAND_A = [[3 / 4, 1 / 4], [1 / 4, 3 / 4]]


def hand_batch(dtype=torch.float64):
    """The hand example's graph ``(e_0, e_1)`` and a single-node graph ``x = (1, 2)``, padded: ``[2, 2, 2]``."""
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 2.0]], dtype=dtype)
    return to_dense(x, torch.tensor([0, 0, 1]))
