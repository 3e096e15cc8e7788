"""Tangent-space linear mixing; mirror of ``reference/mixing.py`` (math there)."""

from __future__ import annotations

import math

import torch
from torch import nn

from manifold_impl.draws import normal_


class TangentMixing(nn.Module):
    """mix(c) = α c + P (Qᵀ c) on coordinates ``c: [..., dim]``."""

    def __init__(self, mode, dim, rank=None, device=None, dtype=None):
        super().__init__()
        self.mode, self.dim, self.rank = mode, dim, rank
        factory = {"device": device, "dtype": dtype}
        if mode != "none":
            self.step_size = nn.Parameter(torch.ones((), **factory))
        if mode == "lowrank":
            self.left = nn.Parameter(torch.zeros(dim, rank, **factory))
            self.right = nn.Parameter(torch.empty(dim, rank, **factory))

    def reset_parameters(self, generator=None):
        if self.mode != "none":
            nn.init.ones_(self.step_size)
        if self.mode == "lowrank":
            nn.init.zeros_(self.left)
            normal_(self.right, std=1.0 / math.sqrt(self.dim), generator=generator)

    def forward(self, c):
        if self.mode == "none":
            return c
        mixed = self.step_size * c
        if self.mode == "lowrank":
            mixed = mixed + (c @ self.right) @ self.left.T
        return mixed
