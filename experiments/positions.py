"""Position schemes of the GPT baseline's attention (torch only): rotary embeddings and ALiBi.

``rotary_frequencies``/``rotate`` and ``alibi_slopes``/``alibi_mask``; the conventions: ``rotate``.
"""

from __future__ import annotations

import math

import torch

POSITIONS = ("learned", "rotary", "alibi")
ROTARY_BASE = 10_000.0


def _angle_dtype(dtype):
    """Angles in float64 for float64 inputs, float32 otherwise (half precision loses m·θ at long lengths)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def rotary_frequencies(dim, base=ROTARY_BASE, dtype=torch.float32, device=None):
    """θ_i = base^{-2i/dim}, i = 0 … dim/2 − 1: ``[dim / 2]``."""
    if dim % 2:
        raise ValueError(f"rotary positions need an even head width, got {dim}")
    exponents = torch.arange(0, dim, 2, dtype=dtype, device=device) / dim
    return base ** -exponents


def rotate(x, start=0, base=ROTARY_BASE):
    """Rotary position embedding of queries or keys (Su et al. 2021).

    Args:
        x: ``[..., T, d]`` (d even), row t at global position ``start + t``.
        start: the position of the first row.
        base: b in θ_i = b^{-2i/d}.

    Returns:
        ``[..., T, d]``: pair (x_{2i}, x_{2i+1}) of row t rotated by (start + t)·θ_i,
        (x_{2i} cos φ − x_{2i+1} sin φ, x_{2i} sin φ + x_{2i+1} cos φ).

    Both act inside attention and have no parameters, so a model using them has no position
    embedding and accepts sequences of any length (learned absolute positions, the third scheme,
    are an ``nn.Embedding`` in ``experiments.baselines``).

    Notation: one attention head of width d; a query at position m, a key at position n; positions
    are global token indices, so a call that continues a sequence after P tokens passes ``start=P``.

    - Rotary (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding",
      eq. 34): split q into the d/2 pairs (q_{2i}, q_{2i+1}) and rotate pair i by the angle m·θ_i,
      θ_i = b^{-2i/d} with b = ``ROTARY_BASE``; keys likewise at n. Reading each pair as a complex
      number q̃_i = q_{2i} + i·q_{2i+1}, the rotated vectors' dot product is
      ``Σ_i Re(q̃_i · conj(k̃_i) · e^{i(m − n)θ_i})``: it depends on the positions only through m − n.
    - ALiBi (Press et al. 2022, "Train Short, Test Long: Attention with Linear Biases Enables Input
      Length Extrapolation", §3): no rotation; head h adds ``−s_h · (m − n)`` to the score of every
      key n ≤ m. For H heads, H a power of two, the slopes are the geometric sequence
      ``s_h = 2^{−8h/H}``, h = 1 … H (8 heads: 1/2, 1/4, …, 1/256). Otherwise, with K the largest
      power of two below H, the slopes are those of K heads followed by the first H − K of the
      odd-indexed slopes of 2K heads (``2^{−8h/(2K)}``, h = 1, 3, 5, …), which lie between them.
    """
    length, dim = x.shape[-2], x.shape[-1]
    dtype = _angle_dtype(x.dtype)
    positions = torch.arange(start, start + length, dtype=dtype, device=x.device)
    angles = positions[:, None] * rotary_frequencies(dim, base, dtype, x.device)  # [T, d/2]
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    pairs = x.unflatten(-1, (dim // 2, 2))  # [..., T, d/2, 2]
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def alibi_slopes(num_heads):
    """ALiBi's per-head slopes s_1 … s_H (Press et al. 2022; see the module docstring): ``[H]`` float64."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    below = 2 ** int(math.floor(math.log2(num_heads)))  # K

    def geometric(count):
        return [2.0 ** (-8.0 * h / count) for h in range(1, count + 1)]

    return torch.tensor(geometric(below) + geometric(2 * below)[0::2][: num_heads - below], dtype=torch.float64)


def alibi_mask(num_heads, queries, keys, dtype=torch.float32, device=None):
    """The additive attention mask of ALiBi with causal masking.

    The ``queries`` rows are the last of ``keys`` positions: query i sits at m = keys − queries + i,
    key j at n = j.

    Returns:
        ``[H, queries, keys]``: −s_h·(m − n) where n ≤ m, −inf where n > m (a future key).
    """
    if queries > keys:
        raise ValueError(f"{queries} queries cannot follow from only {keys} keys")
    query_positions = torch.arange(keys - queries, keys, device=device)
    distance = (query_positions[:, None] - torch.arange(keys, device=device)[None, :]).to(dtype)  # [Tq, Tk]
    slopes = alibi_slopes(num_heads).to(dtype=dtype, device=device)
    bias = -slopes[:, None, None] * distance  # [H, Tq, Tk]
    return bias.masked_fill(distance < 0, float("-inf"))


__all__ = ["POSITIONS", "ROTARY_BASE", "alibi_mask", "alibi_slopes", "rotary_frequencies", "rotate"]
