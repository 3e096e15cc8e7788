"""Input checks; mirror of ``reference/validation.py``."""

from __future__ import annotations

import torch

from manifold_impl.linalg import default_atol


def _traced(tensor):
    """Whether ``tensor``'s values cannot be read back here: ``torch.compile`` traces the call, or
    ``tensor`` lives on a CUDA device whose stream is capturing a CUDA graph. A check then asserts
    on the device (``torch._assert_async``) instead of reading its verdict back."""
    return torch.compiler.is_compiling() or (tensor.device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def check_tokens(tokens, vocab_size, device=None):
    """Validate token ids ``tokens: [batch, length]`` (an integer tensor) where they are; returns
    them on ``device`` (default: where they are). Ids on the host are checked there, with no read
    from the device, and copied without blocking (from pinned memory the copy runs asynchronously).
    Where the call is traced (``torch.compile``, or ids on a CUDA device while a CUDA graph is
    captured), the range is asserted on the device instead (no host read; the error then cannot
    name the id).

    Raises:
        TypeError: not an int64 or int32 tensor.
        ValueError: wrong rank, empty, or an id outside [0, vocab_size).
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"token ids must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"token ids must be integers of dtype torch.int64 or torch.int32 (what an embedding "
                        f"reads), got {tokens.dtype}; cast them with tokens.long()")
    if tokens.dim() != 2:
        raise ValueError(f"token ids must have shape [batch, length], got shape {tuple(tokens.shape)}")
    if tokens.numel() == 0:
        raise ValueError(f"token ids are empty: shape {tuple(tokens.shape)}")
    low, high = torch.aminmax(tokens)
    if _traced(tokens):  # an assertion in the graph, no host read
        torch._assert_async((low >= 0) & (high < vocab_size), f"a token id is out of range [0, {vocab_size})")
    elif ((low < 0) | (high >= vocab_size)).item():  # one host read, before any work
        bad = int(low) if low < 0 else int(high)
        raise ValueError(f"token id {bad} is out of range [0, {vocab_size})")
    return tokens if device is None else tokens.to(device, non_blocking=True)


def check_state(group, state, batch, dtype, layers=None):
    """Validate an initial state ``state: [batch, n, n]`` on ``group`` (``[layers, batch, n, n]``
    with ``layers``: the state of a stacked group RNN), of the model's state ``dtype``.

    Raises:
        TypeError: not a tensor, or another dtype (named, with the cast that fixes it).
        ValueError: another shape, or off the group (a state on it only to float32 precision, as a
            float32 state cast to float64 is, is named as such, with the remedy).
    """
    shape = (batch, group.n, group.n) if layers is None else (layers, batch, group.n, group.n)
    if isinstance(state, (tuple, list)):
        raise TypeError(f"state must be one tensor, the group element H of shape {shape}, not a {type(state).__name__}: "
                        "a group RNN has no LSTM-style (h, c) pair; pass the state an earlier call returned")
    if not isinstance(state, torch.Tensor):
        raise TypeError(f"state must be a torch.Tensor, got {type(state).__name__}")
    if state.dtype != dtype:
        raise TypeError(f"state must have the model's state dtype {dtype}, got {state.dtype}; "
                        f"cast it with state.to({dtype})")
    if tuple(state.shape) != shape:
        raise ValueError(f"state must have shape {shape}, got {tuple(state.shape)}")
    ok, reason = group.is_member(state, explain=True)
    if not ok:
        real = state.real.dtype if state.is_complex() else state.dtype
        if real == torch.float64 and group.is_member(state, atol=default_atol(torch.float32, group.n)):
            raise ValueError(f"state is on {group!r} only to float32 precision ({reason}), as a float32 state "
                             f"cast to float64 is; move it onto the group in float64 with group.nearest(state)")
        raise ValueError(f"state is not on {group!r}: {reason}")
    return state
