"""Word problems on permutation groups (task ``words``: ``word_group`` S3, A5 or S5) behind the task
interface; the generator is ``experiments/tasks/words.py``, the lengths and metrics
``experiments/tasks/length_generalization.py``."""

from __future__ import annotations

from dataclasses import dataclass

from experiments.tasks.length_generalization import LengthGeneralizationTask, LengthsConfig
from experiments.tasks.words import GROUPS, permutation_group, word_batch


@dataclass(frozen=True)
class WordsConfig(LengthsConfig):
    """``word_group``: the group whose words are tracked (a key of ``words.GROUPS``)."""

    word_group: str = "S5"

    def __post_init__(self):
        super().__post_init__()
        if self.word_group not in GROUPS:
            raise ValueError(f"unknown word_group {self.word_group!r}; choose one of {list(GROUPS)}")


class Words(LengthGeneralizationTask):
    """Element ids in, the id of the left-to-right running product out at every position."""

    Config = WordsConfig

    @property
    def vocab_size(self):
        return permutation_group(self.config.word_group).order

    def sample(self, generator, batch, length):
        return word_batch(permutation_group(self.config.word_group), generator, batch, length)


TASKS = {"words": Words}
