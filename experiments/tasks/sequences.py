"""What the long-range memory and state-tracking tasks share (docs/design.md, Tasks and data): checks, lengths, curriculum.

Every generator of ``copying``, ``bits`` and ``words`` draws from an explicit
``numpy.random.Generator`` and returns NumPy int64 arrays ``inputs: [B, L]``, ``targets: [B, L]``,
labelled at every position. Behind the task interface (``experiments/tasks/base.py``) training
draws from the run's generator and each evaluation split from ``split_generator(seed, split)``, so
the streams are independent.

The study trains on lengths up to ``TRAIN_MAX_LENGTH`` and tests at ``TEST_LENGTHS``; the copy
task trains and tests at each fixed delay in ``copying.COPY_DELAYS``. ``curriculum_length`` is the
optional length curriculum (short sequences first).
"""

from __future__ import annotations

import numpy as np

TRAIN_MAX_LENGTH = 64
TEST_LENGTHS = (64, 128, 256, 512, 1024)


def require_int(name, value, minimum):
    """``value`` as an int; TypeError unless an int (bool refused), ValueError below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def require_generator(generator):
    """TypeError unless ``generator`` is a ``numpy.random.Generator``."""
    if not isinstance(generator, np.random.Generator):
        raise TypeError(
            f"generator must be a numpy.random.Generator (numpy.random.default_rng(seed)), "
            f"got {type(generator).__name__}")
    return generator


def curriculum_length(step, start, end, ramp):
    """Training length at ``step`` (0-based) of a linear curriculum from ``start`` to ``end``.

    length(step) = start + ⌊(end − start) · min(step, ramp) / ramp⌋: it grows by equal steps over
    the first ``ramp`` steps and stays at ``end`` afterwards (``ramp=0``: always ``end``).

    >>> [curriculum_length(s, 8, 64, 100) for s in (0, 1, 50, 99, 100, 500)]
    [8, 8, 36, 63, 64, 64]
    """
    step = require_int("step", step, 0)
    start = require_int("start", start, 1)
    end = require_int("end", end, start)
    ramp = require_int("ramp", ramp, 0)
    if ramp == 0:
        return end
    return start + (end - start) * min(step, ramp) // ramp

