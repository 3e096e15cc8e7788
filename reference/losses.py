"""Losses (autograd-differentiable)."""

from __future__ import annotations

import autograd.numpy as anp
from autograd.scipy.special import logsumexp

IGNORE_INDEX = -100


def cross_entropy(logits, targets, ignore_index=IGNORE_INDEX):
    """Mean negative log-likelihood in nats over the positions whose target is not ``ignore_index``.

    Args:
        logits: [..., V] unnormalized log-probabilities.
        targets: [...] integer ids in [0, V), or ``ignore_index``.
    """
    log_probs = logits - logsumexp(logits, axis=-1, keepdims=True)  # [..., V]
    flat = anp.reshape(log_probs, (-1, logits.shape[-1]))
    ids = anp.reshape(targets, (-1,))
    keep = ids != ignore_index
    picked = flat[anp.arange(ids.shape[0])[keep], ids[keep]]
    return -anp.mean(picked)
