"""Language modelling on a token stream (task ``lm``): random training windows, windowed evaluation.

Training batches are ``batch`` windows of ``length + 1`` tokens at uniform random offsets of the
train stream (inputs and the targets shifted by one). Evaluation cuts the first ``eval_tokens + 1``
tokens of a split into consecutive non-overlapping windows of ``length + 1`` (the state restarts at
each window) and reports the mean cross-entropy in bits per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from experiments.datasets import DATASETS, load_dataset
from experiments.tasks.base import Task, model_device


def random_windows(stream, batch, length, generator):
    """``batch`` random windows of ``length + 1`` tokens from a 1-D id stream: (inputs, targets).

    Args:
        stream: [N] int64 NumPy array.
        generator: numpy.random.Generator.

    Returns:
        inputs, targets: [batch, length] int64 tensors (targets are inputs shifted by one).
    """
    if len(stream) < length + 1:
        raise ValueError(f"stream of {len(stream)} tokens is shorter than one window of {length + 1}")
    starts = generator.integers(0, len(stream) - length, size=batch)
    windows = torch.from_numpy(np.stack([stream[s:s + length + 1] for s in starts]))
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def bits_per_token(model, stream, length, batch=64):
    """Mean cross-entropy in bits per token over consecutive non-overlapping windows of ``stream``
    (the state restarts at each window), on the model's device."""
    count = (len(stream) - 1) // length
    if count == 0:
        raise ValueError(f"stream of {len(stream)} tokens is shorter than one window of {length + 1}")
    windows = np.stack([stream[i * length:i * length + length + 1] for i in range(count)])
    losses = []
    for start in range(0, count, batch):
        chunk = torch.from_numpy(windows[start:start + batch]).to(model_device(model))
        logits, _ = model(chunk[:, :-1])
        nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="none")
        losses.append(nats.double().cpu().numpy())
    return float(np.mean(np.concatenate(losses))) / math.log(2)  # one float64 sum in a fixed order


@dataclass(frozen=True)
class LanguageModellingConfig:
    """``dataset``: a key of ``experiments.datasets.DATASETS``; ``length``: tokens per window;
    ``eval_tokens``: how many tokens of a split one evaluation reads."""

    dataset: str | None = None
    length: int = 128
    eval_tokens: int = 50_000

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose one of {sorted(DATASETS)} (--dataset)")
        for name in ("length", "eval_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


class LanguageModelling(Task):
    """Next-token prediction on a dataset's streams; ``valid_bits`` and ``test_bits_per_token``."""

    Config = LanguageModellingConfig

    def __init__(self, config, seed):
        super().__init__(config, seed)
        self.data = load_dataset(config.dataset)

    @property
    def vocab_size(self):
        return len(self.data.vocabulary)

    def train_batch(self, generator, batch, step):
        return random_windows(self.data.streams["train"], batch, self.config.length, generator)

    def bits(self, model, split):
        """Bits per token on the first ``eval_tokens`` tokens of ``split``."""
        return bits_per_token(model, self.data.streams[split][: self.config.eval_tokens + 1], self.config.length)

    def evaluate(self, model, split):
        if split == "valid":
            return {"valid_bits": self.bits(model, "valid")}
        if split != "test":
            raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
        tested = "test" if "test" in self.data.streams else "valid"  # Tiny Shakespeare has no test split
        bits = self.bits(model, tested)
        result = {"test_split": tested, "test_bits_per_token": bits}
        if self.data.word_level:
            result["test_perplexity"] = 2.0 ** bits
        return result

    def train_metrics(self, loss):
        return {"train_bits": loss / math.log(2)}


TASKS = {"lm": LanguageModelling}
