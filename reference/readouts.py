"""Readouts from group-valued states to logits (docs/design.md, Models).

``linear``:     logits_v = Σ_k R_vk features(H)_k + c_v            R: [V, m], m = group.num_features
``prototype``:  logits_v = τ · Re tr(H^H P_v)                     P_v ∈ G, τ ∈ ℝ (init 1/√n)
"""

from __future__ import annotations

import numpy as np

from reference.linalg import frobenius_inner
from reference.params import ParamSpec


class LinearReadout:
    """Affine map of features(H) (docs/design.md, Models: the entries of H the group allows to be non-zero).
    ``states: [..., n, n] -> logits: [..., V]``. On the compact groups ‖features(H)‖² = n, so R
    starts with std 1/√n (unit-variance logits)."""

    def __init__(self, group, vocab_size):
        self.group, self.vocab_size = group, vocab_size

    def param_spec(self):
        n = self.group.n
        return {
            "weight": ParamSpec((self.vocab_size, self.group.num_features), std=1.0 / np.sqrt(n)),
            "bias": ParamSpec((self.vocab_size,), scale=0.1),
        }

    def __call__(self, params, states):
        return self.group.features(states) @ params["weight"].T + params["bias"]


class PrototypeReadout:
    """Similarity to V group-valued prototypes. ``states: [..., n, n] -> logits: [..., V]``."""

    def __init__(self, group, vocab_size):
        self.group, self.vocab_size = group, vocab_size

    def param_spec(self):
        n = self.group.n
        return {
            "prototypes": ParamSpec((self.vocab_size, n, n), group=self.group, haar=True),
            "temperature": ParamSpec((), mean=1.0 / np.sqrt(n), scale=0.3),
        }

    def __call__(self, params, states):
        similarity = frobenius_inner(states[..., None, :, :], params["prototypes"])  # [..., V]
        return params["temperature"] * similarity


READOUTS = {"linear": LinearReadout, "prototype": PrototypeReadout}
