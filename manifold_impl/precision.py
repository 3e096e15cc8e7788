"""Mixed precision: the parts of a model that keep the parameters' precision under ``torch.autocast``.

Under autocast (``experiments.train --precision bf16``, or fp16 on CUDA) the maps into the Lie
algebra, the readouts, attention and the mLSTM's projections run in the lower precision, while the
group product, the exponential and the state itself run in ``full_precision``: autocast is off there
and the inputs are cast back to the parameters' dtype, so a state stays on its group within the
float32 membership tolerance (a bfloat16 product would move it off by about 1e-2 per step). Outside
autocast both functions change nothing.
"""

from __future__ import annotations

import contextlib

import torch


def full_precision(device):
    """A context with autocast off on ``device``'s type (a null context where it is off already, or
    where autocast does not exist for that type)."""
    device_type = torch.device(device).type
    if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def to_real(tensor, like):
    """``tensor`` (real) in the real precision of ``like`` (real or complex): float32 for complex64."""
    dtype = like.real.dtype if like.is_complex() else like.dtype
    return tensor if tensor.dtype == dtype else tensor.to(dtype)
