"""Input checks that run before any work, so bad input fails with a message naming the problem."""

from __future__ import annotations

import numpy as np


def check_tokens(tokens, vocab_size):
    """Validate a batch of token ids ``tokens: [batch, length]`` and return it as an int array.

    Raises:
        TypeError: not an integer array (e.g. floats where ids are expected).
        ValueError: wrong rank, empty, or an id outside [0, vocab_size).
    """
    tokens = np.asarray(tokens)
    if tokens.dtype.kind not in "iu":
        raise TypeError(f"token ids must be integers, got dtype {tokens.dtype}")
    if tokens.ndim != 2:
        raise ValueError(f"token ids must have shape [batch, length], got shape {tokens.shape}")
    if tokens.size == 0:
        raise ValueError(f"token ids are empty: shape {tokens.shape}")
    low, high = tokens.min(), tokens.max()
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"token id {bad} is out of range [0, {vocab_size})")
    return tokens


def check_state(group, state, batch, layers=None):
    """Validate an initial state ``state: [batch, n, n]`` on ``group`` (``[layers, batch, n, n]``
    with ``layers``: the state of a stacked group RNN)."""
    shape = (batch, group.n, group.n) if layers is None else (layers, batch, group.n, group.n)
    if isinstance(state, (tuple, list)):
        raise TypeError(f"state must be one array, the group element H of shape {shape}, not a {type(state).__name__}: "
                        "a group RNN has no LSTM-style (h, c) pair; pass the state an earlier call returned")
    if np.shape(state) != shape:
        raise ValueError(f"state must have shape {shape}, got {np.shape(state)}")
    ok, reason = group.is_member(state, explain=True)
    if not ok:
        raise ValueError(f"state is not on {group!r}: {reason}")
    return state
