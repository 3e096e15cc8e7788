"""The ``copy`` task: recall 10 symbols after a delay of T blanks (Arjovsky et al. 2016, expRNN's form).

``copy_example``/``copy_batch`` generate the sequences (NumPy, seeded by an explicit generator) and
``baseline_loss`` is the memoryless model's loss every result is reported against; ``Copy`` is the
task behind ``experiments.train``. The contract, with a worked example: ``Copy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from experiments.tasks.base import Task, model_device, split_generator
from experiments.tasks.sequences import require_generator, require_int

BLANK = 0
MARKER = 9
NUM_SYMBOLS = 8            # symbols are the ids 1..NUM_SYMBOLS
COPY_LENGTH = 10           # symbols to remember
VOCAB_SIZE = NUM_SYMBOLS + 2
COPY_DELAYS = (100, 500, 1000, 2000)


def sequence_length(delay, copy_length=COPY_LENGTH):
    """T + 2K: the K symbols, the delay, the marker and the K − 1 blanks after it."""
    return require_int("delay", delay, 0) + 2 * require_int("copy_length", copy_length, 1)


def baseline_loss(delay, copy_length=COPY_LENGTH):
    """Memoryless cross-entropy per position, ``K · ln 8 / (T + 2K)`` nats (K = 10: ``10 · ln 8 / (T + 20)``)."""
    return copy_length * math.log(NUM_SYMBOLS) / sequence_length(delay, copy_length)


def copy_example(symbols, delay):
    """Inputs and targets for given symbols.

    Args:
        symbols: [B, K] ints in 1..8 (K = 10 in the benchmark).
        delay: T ≥ 0 blanks between the symbols and the marker.

    Returns:
        inputs, targets: int64 ``[B, T + 2K]``.
    """
    symbols = np.asarray(symbols)
    if symbols.ndim != 2 or symbols.shape[1] < 1:
        raise ValueError(f"symbols must have shape [B, K] with K ≥ 1, got {symbols.shape}")
    if not np.issubdtype(symbols.dtype, np.integer):
        raise TypeError(f"symbols must be integers, got dtype {symbols.dtype}")
    if symbols.size and (symbols.min() < 1 or symbols.max() > NUM_SYMBOLS):
        raise ValueError(f"symbols must lie in 1..{NUM_SYMBOLS}, got values in "
                         f"[{symbols.min()}, {symbols.max()}]")
    count = symbols.shape[1]
    length = sequence_length(delay, count)
    inputs = np.full((symbols.shape[0], length), BLANK, dtype=np.int64)
    targets = np.full_like(inputs, BLANK)
    inputs[:, :count] = symbols
    inputs[:, length - count] = MARKER
    targets[:, length - count:] = symbols
    return inputs, targets


def copy_batch(generator, batch, delay, copy_length=COPY_LENGTH):
    """A batch of the copy task with uniform symbols: ``inputs, targets: [batch, delay + 2K]``."""
    generator = require_generator(generator)
    batch = require_int("batch", batch, 1)
    copy_length = require_int("copy_length", copy_length, 1)
    symbols = generator.integers(1, NUM_SYMBOLS + 1, size=(batch, copy_length))
    return copy_example(symbols, delay)


EVAL_BATCH = 64  # sequences per forward pass in evaluation (the result does not depend on it)


@dataclass(frozen=True)
class CopyConfig:
    """The copy task's sizes.

    Attributes:
        delay: T, the blanks between the symbols and the cue to copy them.
        copy_length: K, the symbols to remember (10 in the benchmark).
        eval_sequences: sequences of each evaluation set.
    """

    delay: int = COPY_DELAYS[0]
    copy_length: int = COPY_LENGTH
    eval_sequences: int = 128

    def __post_init__(self):
        require_int("delay", self.delay, 0)
        require_int("copy_length", self.copy_length, 1)
        require_int("eval_sequences", self.eval_sequences, 1)


class Copy(Task):
    """Symbols, blanks, marker in; blanks then the symbols out.

    The copy task (Arjovsky et al. 2016, in expRNN's form; docs/design.md, Tasks and data): recall 10 symbols after a delay.

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

    The benchmark copies K = ``COPY_LENGTH`` = 10 symbols; every function takes another K (length
    T + 2K, baseline K · ln 8 / (T + 2K)) for small smoke runs.

    Worked example (delay T = 2, length 22): the marker is at position 12 = 10 + T, the symbols are
    due at positions 12–21.

    >>> inputs, targets = copy_example([[5, 2, 7, 1, 8, 8, 3, 4, 6, 1]], delay=2)
    >>> inputs.tolist()
    [[5, 2, 7, 1, 8, 8, 3, 4, 6, 1, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
    >>> targets.tolist()
    [[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 2, 7, 1, 8, 8, 3, 4, 6, 1]]
    """

    Config = CopyConfig
    selection_key = "valid_loss"  # the learning-rate search (experiments.tuning) minimises it

    @property
    def vocab_size(self):
        return VOCAB_SIZE

    def train_batch(self, generator, batch, step):
        return tuple(torch.from_numpy(a) for a in copy_batch(generator, batch, self.config.delay,
                                                             self.config.copy_length))

    @torch.no_grad()
    def evaluate(self, model, split):
        config = self.config
        inputs, targets = copy_batch(split_generator(self.seed, split), config.eval_sequences, config.delay,
                                     config.copy_length)
        nats, right = [], []
        for start in range(0, len(inputs), EVAL_BATCH):
            chunk = torch.from_numpy(inputs[start:start + EVAL_BATCH]).to(model_device(model))
            logits, _ = model(chunk)
            labels = torch.from_numpy(targets[start:start + EVAL_BATCH]).to(logits.device)
            nats.append(F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").double().cpu())
            right.append((logits.argmax(-1) == labels)[:, -config.copy_length:].cpu())
        return {f"{split}_loss": float(torch.cat(nats).mean()),
                f"{split}_baseline_loss": baseline_loss(config.delay, config.copy_length),
                f"{split}_recall_accuracy": float(torch.cat(right).double().mean())}


TASKS = {"copy": Copy}
