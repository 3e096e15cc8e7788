"""Running counts of a bit stream (task ``count``: parity with ``modulus=2``, counting mod 3 with
``modulus=3``) behind the task interface; the generator is ``experiments/tasks/bits.py``, the
lengths and metrics ``experiments/tasks/length_generalization.py``."""

from __future__ import annotations

from dataclasses import dataclass

from experiments.tasks.bits import PARITY, count_batch, vocab_size
from experiments.tasks.length_generalization import LengthGeneralizationTask, LengthsConfig
from experiments.tasks.sequences import require_int


@dataclass(frozen=True)
class CountingConfig(LengthsConfig):
    """``modulus``: m of the running count (2: parity)."""

    modulus: int = PARITY

    def __post_init__(self):
        super().__post_init__()
        require_int("modulus", self.modulus, 2)


class Counting(LengthGeneralizationTask):
    """Bits in, (running count mod m) out at every position."""

    Config = CountingConfig

    @property
    def vocab_size(self):
        return vocab_size(self.config.modulus)

    def sample(self, generator, batch, length):
        return count_batch(generator, batch, length, self.config.modulus)


TASKS = {"count": Counting}
