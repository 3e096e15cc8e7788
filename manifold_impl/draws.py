"""Random draws that give the same values on every device (torch only; no reference twin).

A draw from a ``torch.Generator`` happens on the generator's own device and is then copied to the
tensor's, so a CPU seed builds the same model on the CPU and on CUDA; without a generator a draw
uses the global generator of the tensor's device.
"""

from __future__ import annotations

import torch


def drawing_device(generator, device):
    """Where a draw from ``generator`` happens: the generator's device, else ``device``."""
    return device if generator is None else generator.device


@torch.no_grad()
def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """``torch.nn.init.normal_`` drawn on ``generator``'s device and copied into ``tensor``."""
    if generator is None or generator.device == tensor.device:
        return torch.nn.init.normal_(tensor, mean, std, generator=generator)
    drawn = torch.empty(tensor.shape, dtype=tensor.dtype, device=generator.device).normal_(mean, std, generator=generator)
    return tensor.copy_(drawn)
