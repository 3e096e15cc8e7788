"""Noisy in-context recall (task ``recall``, SPEC §6) behind the task interface.

Training: a fresh batch every step from the run's stream, next-token targets on every position.
Evaluation: accuracy on the scored positions (repeated keys and the probe; see
``experiments/tasks/nar.py``) of a fixed set of ``valid_sequences`` sequences per split, each split
drawn from its own stream (``split_generator``), independent of the training stream (``seed``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from experiments.tasks.base import SPLIT_SEED_OFFSETS, Task, model_device, split_generator
from experiments.tasks.nar import NoisyRecallConfig, NoisyRecallTask, accuracy

EVAL_BATCH = 64  # sequences per forward pass in evaluation (the result does not depend on it)
# The post's optimization, as experiments.train options: AdamW with weight decay, no clipping, no
# warm-up, cosine decay; the defaults of the noisy-recall study's runs.
RECIPE = {"steps": 2000, "batch": 64, "lr": 1e-3, "schedule": "cosine", "weight_decay": 0.01, "clip": None,
          "eval_every": 100}


@dataclass(frozen=True)
class RecallConfig(NoisyRecallConfig):
    """The generator's configuration and ``valid_sequences``, the size of each evaluation set."""

    valid_sequences: int = 256

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.valid_sequences, bool) or not isinstance(self.valid_sequences, int) \
                or self.valid_sequences < 1:
            raise ValueError(f"valid_sequences must be a positive int, got {self.valid_sequences!r}")


class Recall(Task):
    """Noisy recall: ``train_loss`` (nats) in training, ``{split}_accuracy`` in evaluation."""

    Config = RecallConfig

    def __init__(self, config, seed):
        super().__init__(config, seed)
        self.generator = NoisyRecallTask(config)
        self.evaluation_sets = {
            split: tuple(torch.from_numpy(a) for a in self.generator.sample_batch(
                split_generator(seed, split), config.valid_sequences, evaluation=True))
            for split in SPLIT_SEED_OFFSETS}

    @property
    def vocab_size(self):
        return self.config.vocab_size

    def train_batch(self, generator, batch, step):
        return tuple(torch.from_numpy(a) for a in self.generator.sample_batch(generator, batch))

    @torch.no_grad()
    def evaluate(self, model, split):
        if split not in self.evaluation_sets:
            raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
        inputs, targets = self.evaluation_sets[split]
        predictions = []
        for start in range(0, len(inputs), EVAL_BATCH):
            logits, _ = model(inputs[start:start + EVAL_BATCH].to(model_device(model)))
            predictions.append(logits.argmax(dim=-1).cpu())
        return {f"{split}_accuracy": accuracy(torch.cat(predictions).numpy(), targets.numpy())}


TASKS = {"recall": Recall}
