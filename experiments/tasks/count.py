"""The ``count`` task: running counts of a bit stream, parity (``modulus=2``) and counting mod 3.

``count_example``/``count_batch`` generate the sequences (NumPy, seeded by an explicit generator);
``Counting`` is the task behind ``experiments.train``, trained on short lengths and tested longer
(``experiments.tasks.length_generalization``). The contract, with a worked example: ``Counting``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from experiments.tasks.length_generalization import LengthGeneralizationTask, LengthsConfig
from experiments.tasks.sequences import require_generator, require_int

PARITY = 2
MOD3 = 3


def vocab_size(modulus):
    """Ids a model must cover: the bits 0, 1 and the counts 0 … m−1."""
    return max(2, require_int("modulus", modulus, 2))


def count_example(bits, modulus):
    """Inputs and running counts mod ``modulus`` for given bits.

    Args:
        bits: [B, L] ints in {0, 1}.
        modulus: m ≥ 2.

    Returns:
        inputs (the bits) and targets ``(cumsum of bits) mod m``, int64 ``[B, L]``.
    """
    modulus = require_int("modulus", modulus, 2)
    bits = np.asarray(bits)
    if bits.ndim != 2:
        raise ValueError(f"bits must have shape [B, L], got {bits.shape}")
    if not np.issubdtype(bits.dtype, np.integer):
        raise TypeError(f"bits must be integers, got dtype {bits.dtype}")
    if bits.size and (bits.min() < 0 or bits.max() > 1):
        raise ValueError(f"bits must be 0 or 1, got values in [{bits.min()}, {bits.max()}]")
    inputs = bits.astype(np.int64)
    return inputs, np.cumsum(inputs, axis=1) % modulus


def count_batch(generator, batch, length, modulus):
    """Uniform bits and their running counts mod ``modulus``: ``inputs, targets: [batch, length]``."""
    generator = require_generator(generator)
    batch = require_int("batch", batch, 1)
    length = require_int("length", length, 1)
    return count_example(generator.integers(0, 2, size=(batch, length)), modulus)


def parity_batch(generator, batch, length):
    """``count_batch`` with m = 2."""
    return count_batch(generator, batch, length, PARITY)


def mod3_batch(generator, batch, length):
    """``count_batch`` with m = 3."""
    return count_batch(generator, batch, length, MOD3)


@dataclass(frozen=True)
class CountingConfig(LengthsConfig):
    """The counting task's lengths and modulus.

    Attributes:
        modulus: m of the running count of ones modulo m (2: parity).
    """

    modulus: int = PARITY

    def __post_init__(self):
        super().__post_init__()
        require_int("modulus", self.modulus, 2)


class Counting(LengthGeneralizationTask):
    """Bits in, (running count mod m) out at every position.

    Running counts of a bit stream (docs/design.md, Tasks and data): parity (mod 2) and counting mod 3.

    Inputs are uniform bits b_1 … b_L ∈ {0, 1}; the target at every position t is the running count
    (b_1 + … + b_t) mod m, with m = 2 for parity and m = 3 for counting mod 3. The models see a
    vocabulary of ``vocab_size(m) = max(2, m)`` ids (the inputs use 0 and 1, the targets 0 … m−1).

    These are the simplest state-tracking tasks: the cyclic group Z_m acting on its own states. An
    input-driven SO(2) state tracks Z_m exactly by turning 2π/m per 1-bit (and not at all per 0-bit).

    >>> inputs, targets = count_example([[1, 0, 1, 1, 0, 1]], modulus=2)
    >>> targets.tolist()
    [[1, 1, 0, 1, 1, 0]]
    >>> count_example([[1, 0, 1, 1, 0, 1]], modulus=3)[1].tolist()
    [[1, 1, 2, 0, 0, 1]]
    """

    Config = CountingConfig

    @property
    def vocab_size(self):
        return vocab_size(self.config.modulus)

    def sample(self, generator, batch, length):
        return count_batch(generator, batch, length, self.config.modulus)


TASKS = {"count": Counting}
