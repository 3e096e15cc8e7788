"""Checks of plain Python values, written once for both trees: ``manifold_impl`` imports them from here
(as it imports ``reference.config``), so the mirror holds the math, not two copies of bookkeeping.

A token position, a cache's type, a group's name and block, an mLSTM state's shapes; the checks of
arrays and tensors themselves stay in each tree's ``validation``.
"""

from __future__ import annotations

import numbers


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


BO_DEFAULT_BLOCK = 2


def group_arguments(name, names, block=None):
    """The arguments after n of the group class called ``name``, one of ``names``: ``(block,)`` for BO
    (default ``BO_DEFAULT_BLOCK``), ``()`` for the others.

    Raises:
        ValueError: ``name`` is not one of ``names``, or a ``block`` is given for a group other than BO.
    """
    if name not in names:
        raise ValueError(f"unknown group {name!r}; choose one of {sorted(names)}")
    if name == "BO":
        return (BO_DEFAULT_BLOCK if block is None else block,)
    if block is not None:
        raise ValueError(f"block={block} only applies to group 'BO', not {name!r}")
    return ()


def check_mlstm_state_fields(config, state, batch, state_type, shape_of, array="array"):
    """``state_type(*state)`` once ``state`` holds an mLSTM state of ``config`` (an ``MLSTMConfig``) for
    ``batch`` sequences: in ``state_type``'s field order, conv_history [B, K−1, D], memory [B, H, P, P],
    normalizer [B, H, P] and stabilizer [B, H] (K the convolution's kernel, D the inner width, H the
    heads, P the head width). ``shape_of(value)``: a field's shape, or None where it is not an ``array``
    (the caller's tree's array type, named in the message).

    Raises:
        TypeError: ``state`` is not a tuple of four, or a field is not an ``array``.
        ValueError: a field's shape, naming the field.
    """
    if not isinstance(state, tuple) or len(state) != 4:
        raise TypeError(f"state must be an {state_type.__name__} (4 arrays), got {type(state).__name__}")
    heads, head_dim, inner = config.num_heads, config.head_dim, config.inner_dim
    expected = ((batch, config.conv1d_kernel_size - 1, inner), (batch, heads, head_dim, head_dim),
                (batch, heads, head_dim), (batch, heads))
    for name, value, shape in zip(state_type._fields, state, expected):
        found = shape_of(value)
        if found is None:
            raise TypeError(f"state.{name} must be a {array}, got {type(value).__name__}")
        if tuple(found) != shape:
            raise ValueError(f"state.{name} must have shape {shape}, got {tuple(found)}")
    return state_type(*state)
