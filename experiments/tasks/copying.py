"""The copy task (Arjovsky et al. 2016, in expRNN's form; SPEC §10): recall 10 symbols after a delay.

Vocabulary of 10 ids: ``BLANK = 0``, the symbols 1–8, ``MARKER = 9``. For a delay ``T`` a sequence
has length ``T + 20``:

    inputs   s_1 … s_10   0 … 0 (T blanks)   9   0 … 0 (9 blanks)
    targets  0 … 0 (T + 10 blanks)               s_1 … s_10

The symbols s_i are uniform over 1–8 (with replacement). The marker is the first of the 10 recall
positions: the model outputs s_1 when it reads the marker and s_2 … s_10 on the 9 blanks after
it. Every position is scored (loss on all T + 20 targets); the target is never the marker.

A memoryless model can at best emit blanks where they are due and guess uniformly at the 10 recall
positions: cross-entropy ``10 · ln 8 / (T + 20)`` nats per position (``baseline_loss``), the line
every result is reported against.

Worked example (delay T = 2, length 22): the marker is at position 12 = 10 + T, the symbols are
due at positions 12–21.

>>> inputs, targets = copy_example([[5, 2, 7, 1, 8, 8, 3, 4, 6, 1]], delay=2)
>>> inputs.tolist()
[[5, 2, 7, 1, 8, 8, 3, 4, 6, 1, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
>>> targets.tolist()
[[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 2, 7, 1, 8, 8, 3, 4, 6, 1]]
"""

from __future__ import annotations

import math

import numpy as np

from experiments.tasks.streams import require_generator, require_int

BLANK = 0
MARKER = 9
NUM_SYMBOLS = 8            # symbols are the ids 1..NUM_SYMBOLS
COPY_LENGTH = 10           # symbols to remember
VOCAB_SIZE = NUM_SYMBOLS + 2
COPY_DELAYS = (100, 500, 1000, 2000)


def sequence_length(delay):
    """T + 20: the symbols, the delay, the marker and the 9 blanks after it."""
    return require_int("delay", delay, 0) + 2 * COPY_LENGTH


def baseline_loss(delay):
    """Memoryless cross-entropy per position, ``10 · ln 8 / (T + 20)`` nats."""
    return COPY_LENGTH * math.log(NUM_SYMBOLS) / sequence_length(delay)


def copy_example(symbols, delay):
    """Inputs and targets for given symbols.

    Args:
        symbols: [B, 10] ints in 1..8.
        delay: T ≥ 0 blanks between the symbols and the marker.

    Returns:
        inputs, targets: int64 ``[B, T + 20]``.
    """
    symbols = np.asarray(symbols)
    if symbols.ndim != 2 or symbols.shape[1] != COPY_LENGTH:
        raise ValueError(f"symbols must have shape [B, {COPY_LENGTH}], got {symbols.shape}")
    if not np.issubdtype(symbols.dtype, np.integer):
        raise TypeError(f"symbols must be integers, got dtype {symbols.dtype}")
    if symbols.size and (symbols.min() < 1 or symbols.max() > NUM_SYMBOLS):
        raise ValueError(f"symbols must lie in 1..{NUM_SYMBOLS}, got values in "
                         f"[{symbols.min()}, {symbols.max()}]")
    length = sequence_length(delay)
    inputs = np.full((symbols.shape[0], length), BLANK, dtype=np.int64)
    targets = np.full_like(inputs, BLANK)
    inputs[:, :COPY_LENGTH] = symbols
    inputs[:, length - COPY_LENGTH] = MARKER
    targets[:, length - COPY_LENGTH:] = symbols
    return inputs, targets


def copy_batch(generator, batch, delay):
    """A batch of the copy task with uniform symbols: ``inputs, targets: [batch, delay + 20]``."""
    generator = require_generator(generator)
    batch = require_int("batch", batch, 1)
    symbols = generator.integers(1, NUM_SYMBOLS + 1, size=(batch, COPY_LENGTH))
    return copy_example(symbols, delay)
