"""Losses; mirror of ``reference/losses.py``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index=IGNORE_INDEX) -> torch.Tensor:
    """Mean negative log-likelihood in nats. ``logits: [..., V]``, ``targets: [...]``."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)
