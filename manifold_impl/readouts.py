"""Readouts; mirror of ``reference/readouts.py`` (math there).

Performance note: Re tr(H^H P_v) = features(H) · features(P_v) for H and P_v on G (the entries off
the group's support are zero), so the prototype readout is one matmul against the prototypes'
features instead of V traces.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from manifold_impl.draws import normal_
from manifold_impl.manifolds import GroupModule, group_parameter


class LinearReadout(nn.Module):
    """``states: [..., n, n] -> logits: [..., V]``: R·features(H) + c."""

    def __init__(self, group, vocab_size, device=None, dtype=None):
        super().__init__()
        self.group, self.vocab_size = group, vocab_size
        self.weight = nn.Parameter(torch.empty(vocab_size, group.num_features, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(vocab_size, device=device, dtype=dtype))

    def reset_parameters(self, generator=None):
        normal_(self.weight, std=1.0 / math.sqrt(self.group.n), generator=generator)
        nn.init.zeros_(self.bias)

    def forward(self, states):
        return self._from_features(self.group.features(states))

    def _from_features(self, features):
        """``features(H): [..., m] -> logits: [..., V]`` (what ``forward`` computes after features; a
        caller holding packed states passes ``group.packed_features`` and never forms H)."""
        return F.linear(features, self.weight, self.bias)


class PrototypeReadout(GroupModule):
    """``states: [..., n, n] -> logits: [..., V]``: τ·Re tr(H^H P_v)."""

    def __init__(self, group, vocab_size, device=None, dtype=None):
        super().__init__()
        self.group, self.vocab_size = group, vocab_size
        self.prototypes = group_parameter(group.identity((vocab_size,), dtype=dtype, device=device), group)
        self.temperature = nn.Parameter(torch.empty((), device=device, dtype=dtype))

    def reset_parameters(self, generator=None):
        """Haar prototypes (drawn on the CPU from ``generator``, default torch's global one)."""
        generator = torch.default_generator if generator is None else generator
        with torch.no_grad():
            self.prototypes.copy_(self.group.random(
                (self.vocab_size,), generator=generator, dtype=self.temperature.dtype, device=generator.device))
            self.temperature.fill_(1.0 / math.sqrt(self.group.n))

    def forward(self, states):
        return self._from_features(self.group.features(states))

    def _from_features(self, features):
        """``features(H): [..., m] -> logits: [..., V]``, as ``LinearReadout._from_features``."""
        return self.temperature * (features @ self.group.features(self.prototypes).T)  # [..., V]


READOUTS = {"linear": LinearReadout, "prototype": PrototypeReadout}
