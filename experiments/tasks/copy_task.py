"""The copy task (task ``copy``, SPEC §10) behind the task interface; the generator is
``experiments/tasks/copying.py``.

Training and evaluation use one fixed delay T (``delay``; the study runs T ∈ {100, 500, 1000, 2000}).
Evaluation: a fixed set of ``eval_sequences`` sequences per split from ``split_generator(seed,
split)``; metrics ``{split}_loss`` (nats per position, every position scored, as in training),
``{split}_baseline_loss`` (the memoryless K·ln 8/(T + 2K), reported next to it) and
``{split}_recall_accuracy`` (argmax accuracy at the K recall positions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from experiments.tasks.base import Task, model_device, split_generator
from experiments.tasks.copying import COPY_DELAYS, COPY_LENGTH, VOCAB_SIZE, baseline_loss, copy_batch
from experiments.tasks.sequences import require_int

EVAL_BATCH = 64  # sequences per forward pass in evaluation (the result does not depend on it)


@dataclass(frozen=True)
class CopyConfig:
    """``delay``: T blanks; ``copy_length``: K symbols (10 in the benchmark); ``eval_sequences``."""

    delay: int = COPY_DELAYS[0]
    copy_length: int = COPY_LENGTH
    eval_sequences: int = 128

    def __post_init__(self):
        require_int("delay", self.delay, 0)
        require_int("copy_length", self.copy_length, 1)
        require_int("eval_sequences", self.eval_sequences, 1)


class Copy(Task):
    """Symbols, blanks, marker in; blanks then the symbols out."""

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
