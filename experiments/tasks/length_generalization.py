"""What the labelled-at-every-position tasks share behind the task interface: train short, test long.

Training: lengths uniform in [``train_min_length``, L_max(step)], one length per batch, where
L_max grows linearly from ``train_min_length`` to ``train_max_length`` over the first
``curriculum_steps`` steps (``sequences.curriculum_length``; 0: no curriculum). Evaluation: fixed
sets of ``eval_sequences`` sequences at the lengths L_j = ``train_max_length · 2^j ≤ eval_max_length``
(64, 128, 256, 512, 1024 by default); the set at L_j is drawn from the j-th child stream of
``split_generator(seed, split)`` (``Generator.spawn``), so it does not depend on the other sets'
sizes. Metrics ``{split}_accuracy@L`` (all positions) and ``{split}_last_accuracy@L`` (the last one).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np
import torch

from experiments.tasks.base import Task, model_device, split_generator
from experiments.tasks.sequences import TEST_LENGTHS, TRAIN_MAX_LENGTH, curriculum_length, require_int

EVAL_BATCH = 64  # sequences per forward pass in evaluation (the result does not depend on it)


@dataclass(frozen=True)
class LengthsConfig:
    """Training and evaluation lengths (fields shared by the counting and word tasks).

    Attributes:
        train_min_length: the shortest training sequence.
        train_max_length: the longest training sequence (after the curriculum).
        curriculum_steps: steps over which the longest training length grows to train_max_length (0: none).
        eval_max_length: evaluation at train_max_length · 2^j up to this length.
        eval_sequences: sequences of each evaluation set.
    """

    train_min_length: int = 1
    train_max_length: int = TRAIN_MAX_LENGTH
    curriculum_steps: int = 0
    eval_max_length: int = TEST_LENGTHS[-1]
    eval_sequences: int = 128

    def __post_init__(self):
        require_int("train_min_length", self.train_min_length, 1)
        require_int("train_max_length", self.train_max_length, self.train_min_length)
        require_int("curriculum_steps", self.curriculum_steps, 0)
        require_int("eval_max_length", self.eval_max_length, self.train_max_length)
        require_int("eval_sequences", self.eval_sequences, 1)

    @property
    def eval_lengths(self):
        """train_max_length · 2^j up to eval_max_length."""
        lengths = [self.train_max_length]
        while 2 * lengths[-1] <= self.eval_max_length:
            lengths.append(2 * lengths[-1])
        return tuple(lengths)


class LengthGeneralizationTask(Task):
    """A task whose ``sample(generator, batch, length)`` labels every position (see the module docstring)."""

    def __init__(self, config, seed):
        super().__init__(config, seed)
        self._evaluation_sets = {}

    @abc.abstractmethod
    def sample(self, generator, batch, length):
        """NumPy ``(inputs, targets)``, int64 ``[batch, length]``."""

    @property
    def train_length(self):
        return self.config.train_max_length

    def train_batch(self, generator, batch, step):
        config = self.config
        longest = curriculum_length(step, config.train_min_length, config.train_max_length, config.curriculum_steps)
        length = int(generator.integers(config.train_min_length, longest + 1))
        return tuple(torch.from_numpy(a) for a in self.sample(generator, batch, length))

    def evaluation_sets(self, split):
        """``{L: (inputs, targets)}``: the fixed NumPy sets of ``split`` (drawn once, then kept)."""
        if split not in self._evaluation_sets:
            lengths = self.config.eval_lengths
            children = split_generator(self.seed, split).spawn(len(lengths))
            self._evaluation_sets[split] = {length: self.sample(child, self.config.eval_sequences, length)
                                            for length, child in zip(lengths, children)}
        return self._evaluation_sets[split]

    @torch.no_grad()
    def evaluate(self, model, split):
        metrics = {}
        for length, (inputs, targets) in self.evaluation_sets(split).items():
            right = np.concatenate([predictions(model, inputs[i:i + EVAL_BATCH]) for i in
                                    range(0, len(inputs), EVAL_BATCH)]) == targets  # [N, length]
            metrics[f"{split}_accuracy@{length}"] = float(right.mean())
            metrics[f"{split}_last_accuracy@{length}"] = float(right[:, -1].mean())
        return metrics


def predictions(model, inputs):
    """Argmax predictions ``[B, T]`` (NumPy) of ``model`` on NumPy ``inputs: [B, T]``."""
    logits, _ = model(torch.from_numpy(inputs).to(model_device(model)))
    return logits.argmax(dim=-1).cpu().numpy()
