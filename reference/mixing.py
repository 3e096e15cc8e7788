"""Tangent-space linear mixing (docs/design.md, Models).

On coordinates c = vee(A) ∈ ℝ^{dim g}:

    mix(c) = α c + P (Qᵀ c),      α ∈ ℝ (init 1),   P, Q ∈ ℝ^{dim g × r} (P init 0)

``none``: mix(c) = c. ``scalar``: α only (the seed's learnable step size). ``lowrank``: α and
the rank-r map P Qᵀ. Since hat is linear, this is mix(A) = α A + hat(P Qᵀ vee(A)). At its
initial value every mode is the identity, exactly (α = 1, P = 0).
"""

from __future__ import annotations

import numpy as np

from reference.params import ParamSpec


class TangentMixing:
    """Mixing of algebra coordinates ``c: [..., dim]``."""

    def __init__(self, mode, dim, rank=None):
        self.mode, self.dim, self.rank = mode, dim, rank

    def param_spec(self):
        if self.mode == "none":
            return {}
        spec = {"step_size": ParamSpec((), mean=1.0, scale=0.1)}
        if self.mode == "lowrank":
            spec["left"] = ParamSpec((self.dim, self.rank), scale=0.3 / np.sqrt(self.rank))
            spec["right"] = ParamSpec((self.dim, self.rank), std=1.0 / np.sqrt(self.dim))
        return spec

    def __call__(self, params, c):
        if self.mode == "none":
            return c
        mixed = params["step_size"] * c
        if self.mode == "lowrank":
            mixed = mixed + (c @ params["right"]) @ params["left"].T  # [..., r] -> [..., dim]
        return mixed
