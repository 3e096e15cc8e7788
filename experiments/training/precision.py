"""Mixed precision of a training step (``--precision``): autocast around the forward pass, and for
fp16 the gradient scaler that keeps small gradients from flushing to zero.

Under ``bf16`` (any device; bfloat16 autocast runs on the CPU) or ``fp16`` (CUDA) the maps, the
readouts, attention and the mLSTM's projections compute in the lower precision, while the group
product, the exponential and the state keep the parameters' float32 (``manifold_impl.precision``),
so a state stays on its group. The parameters, their gradients and the optimizers' moments stay
float32, the loss is taken in float32, and evaluation runs without autocast.
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = {"float32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # --precision -> autocast dtype


class Precision:
    """The autocast context and, for fp16, the ``torch.amp.GradScaler`` of one run on ``device``."""

    def __init__(self, precision, device):
        self.name, self.dtype = precision, PRECISIONS[precision]
        self.device_type = torch.device(device).type
        self.scaler = torch.amp.GradScaler(self.device_type) if precision == "fp16" else None

    def autocast(self):
        """The context of a training step's forward pass (a null context for float32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss, optimizers):
        """``loss.backward()``; for fp16, of the loss times the scaler's factor, and the gradients of
        ``optimizers`` (``Optimizers``) unscaled after it, so that what reads them next (the
        gradient norms, clipping) sees the true gradients."""
        if self.scaler is None:
            loss.backward()
            return
        self.scaler.scale(loss).backward()
        for optimizer in optimizers.optimizers:
            self.scaler.unscale_(optimizer)

    def state_dict(self):
        return None if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state):
        if self.scaler is not None and state is not None:
            self.scaler.load_state_dict(state)
