"""Language-model training helpers shared by the demo and the experiments (torch tree)."""

from __future__ import annotations

import math

import numpy as np
import torch



def random_windows(stream, batch, length, generator):
    """``batch`` random windows of ``length + 1`` tokens from a 1-D id stream: (inputs, targets).

    Args:
        stream: [N] int64 NumPy array.
        generator: numpy.random.Generator.

    Returns:
        inputs, targets: [batch, length] int64 tensors (targets are inputs shifted by one).
    """
    if len(stream) < length + 1:
        raise ValueError(f"stream of {len(stream)} tokens is shorter than one window of {length + 1}")
    starts = generator.integers(0, len(stream) - length, size=batch)
    windows = torch.from_numpy(np.stack([stream[s:s + length + 1] for s in starts]))
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def bits_per_token(model, stream, length, batch=64, device="cpu"):
    """Mean cross-entropy in bits per token over consecutive non-overlapping windows of ``stream``
    (the state restarts at each window)."""
    count = (len(stream) - 1) // length
    if count == 0:
        raise ValueError(f"stream of {len(stream)} tokens is shorter than one window of {length + 1}")
    windows = np.stack([stream[i * length:i * length + length + 1] for i in range(count)])
    losses = []
    for start in range(0, count, batch):
        chunk = torch.from_numpy(windows[start:start + batch]).to(device)
        logits, _ = model(chunk[:, :-1])
        nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="none")
        losses.append(nats.double().cpu().numpy())
    return float(np.mean(np.concatenate(losses))) / math.log(2)  # one float64 sum in a fixed order
