"""Input checks; mirror of ``reference/validation.py``."""

from __future__ import annotations

import numbers

import torch


def check_tokens(tokens, vocab_size):
    """Validate token ids ``tokens: [batch, length]`` (an integer tensor); returns it.

    Raises:
        TypeError: not an integer tensor.
        ValueError: wrong rank, empty, or an id outside [0, vocab_size).
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"token ids must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"token ids must be integers, got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"token ids must have shape [batch, length], got shape {tuple(tokens.shape)}")
    if tokens.numel() == 0:
        raise ValueError(f"token ids are empty: shape {tuple(tokens.shape)}")
    low, high = torch.aminmax(tokens)
    if low < 0 or high >= vocab_size:  # one host sync, before any work
        bad = int(low) if low < 0 else int(high)
        raise ValueError(f"token id {bad} is out of range [0, {vocab_size})")
    return tokens


def check_state(group, state, batch):
    """Validate an initial state ``state: [batch, n, n]`` on ``group``."""
    shape = (batch, group.n, group.n)
    if tuple(state.shape) != shape:
        raise ValueError(f"state must have shape {shape}, got {tuple(state.shape)}")
    ok, reason = group.is_member(state, explain=True)
    if not ok:
        raise ValueError(f"state is not on {group!r}: {reason}")
    return state


def check_position(position):
    """Validate a global token index ``position`` (an int ≥ 0, not a bool)."""
    if isinstance(position, bool) or not isinstance(position, numbers.Integral):
        raise TypeError(f"position must be an int, got {type(position).__name__}")
    if position < 0:
        raise ValueError(f"position must be at least 0, got {position}")
    return position


def check_cache(cache, cache_type):
    """Validate that ``cache`` is a ``cache_type`` (a NamedTuple with a ``position`` field) and
    its position; the model checks the other fields. Returns the cache."""
    if not isinstance(cache, cache_type):
        raise TypeError(f"cache must be a {cache_type.__name__} (the cache an earlier call returned), "
                        f"got {type(cache).__name__}")
    check_position(cache.position)
    return cache
