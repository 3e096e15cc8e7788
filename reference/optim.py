"""Riemannian optimizer steps on parameter dicts, the same math as ``geoopt.optim``.

Gradients here are *ambient* gradients in torch's convention: for a real loss L and a complex
entry z = x + iy, G = ∂L/∂x + i ∂L/∂y. autograd returns the conjugate of that for complex
arrays (pinned by a test); ``ambient_gradients`` converts.

For a group-valued parameter X ∈ G with ambient gradient G_amb (t = step count from 1):

    g   = X Π(X^{-1} (G_amb + λ X))                     Riemannian gradient (λ: weight decay)
    m  ← β₁ m + (1 − β₁) g                              first moment, a tangent vector at X
    v  ← β₂ v + (1 − β₂) Re(conj(g) ⊙ g)                elementwise second moment
    d   = (m / (1 − β₁ᵗ)) / (sqrt(v / (1 − β₂ᵗ)) + ε)
    X' = refine(X exp(Π(X^{-1} (−lr d))))               retraction (the exponential map, then one
                                                        polar Newton step: the identity on G)
    m  ← X' Π(X^{-1} m)                                 transport of the moment to X'

Euclidean parameters take the same step with Π = identity, retraction X − lr d and no transport
(Adam with L2 weight decay, as geoopt's RiemannianAdam does for plain tensors).
"""

from __future__ import annotations

import numpy as np


def ambient_gradients(autograd_grads):
    """Convert autograd's gradients (conjugated for complex arrays) to ambient gradients."""
    return {key: np.conj(g) if np.iscomplexobj(g) else g for key, g in autograd_grads.items()}


class _Adam:
    """Adam's moments and bias-corrected direction, shared by RiemannianAdam and AdamW."""

    def __init__(self, lr, betas, eps, weight_decay):
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.first, self.second, self.steps = {}, {}, 0

    def step(self, params, grads):
        """New parameter dict after one step (keys without a gradient stay)."""
        self.steps += 1
        return {**params, **{key: self._update(key, params[key], grad) for key, grad in grads.items()}}

    def _direction(self, key, g):
        """Update the moments of ``key`` with gradient ``g``; return (m / (1 − β₁ᵗ)) / (sqrt(v / (1 − β₂ᵗ)) + ε)."""
        beta1, beta2 = self.betas
        m = beta1 * self.first.get(key, 0.0) + (1 - beta1) * g
        v = beta2 * self.second.get(key, 0.0) + (1 - beta2) * np.real(np.conj(g) * g)
        self.first[key], self.second[key] = m, v
        return (m / (1 - beta1 ** self.steps)) / (np.sqrt(v / (1 - beta2 ** self.steps)) + self.eps)


class RiemannianAdam(_Adam):
    """Mirror of ``geoopt.optim.RiemannianAdam`` (no amsgrad, no stabilize).

    Args:
        specs: ``{key: ParamSpec}`` of the model (its ``group`` marks group-valued parameters).
        grads passed to ``step`` are ambient gradients (see ``ambient_gradients``).
    """

    def __init__(self, specs, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(lr, betas, eps, weight_decay)
        self.groups = {key: spec.group for key, spec in specs.items()}

    def _update(self, key, point, grad):
        group = self.groups[key]
        g = grad + self.weight_decay * point
        if group is None:
            return point - self.lr * self._direction(key, g)
        direction = self._direction(key, group.proj_tangent(point, g))
        moved = group.refine(group.retr(point, -self.lr * direction))
        self.first[key] = group.mul(moved, group.proj(group.mul(group.inv(point), self.first[key])))
        return moved


class RiemannianSGD:
    """Mirror of ``geoopt.optim.RiemannianSGD`` without momentum: X' = retr(X, −lr·rgrad)."""

    def __init__(self, specs, lr=1e-3, weight_decay=0.0):
        self.groups = {key: spec.group for key, spec in specs.items()}
        self.lr, self.weight_decay = lr, weight_decay

    def step(self, params, grads):
        updated = dict(params)
        for key, grad in grads.items():
            point, group = params[key], self.groups[key]
            g = grad + self.weight_decay * point
            if group is None:
                updated[key] = point - self.lr * g
            else:
                updated[key] = group.refine(group.retr(point, -self.lr * group.proj_tangent(point, g)))
        return updated


class AdamW(_Adam):
    """Mirror of ``torch.optim.AdamW`` (no amsgrad) on parameter dicts (Euclidean parameters); t counts steps from 1::

        p ← p (1 − lr λ)                                   decoupled weight decay
        m ← β₁ m + (1 − β₁) g,   v ← β₂ v + (1 − β₂) g²
        p ← p − lr (m / (1 − β₁ᵗ)) / (sqrt(v / (1 − β₂ᵗ)) + ε)
    """

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(lr, betas, eps, weight_decay)

    def _update(self, key, point, grad):
        return point * (1 - self.lr * self.weight_decay) - self.lr * self._direction(key, grad)
