"""Language modelling on a token stream (task ``lm``): random training windows, windowed and
carried-state evaluation.

Training batches are ``batch`` windows of ``length + 1`` tokens at uniform random offsets of the
train stream (inputs and the targets shifted by one). The windowed evaluation cuts the first
``eval_tokens + 1`` tokens of a split into consecutive non-overlapping windows of ``length + 1``
(the state restarts at each window) and reports the mean cross-entropy in bits per token; it is
the validation metric at every evaluation and what model selection minimises. At the end, with
``carried_streams`` > 0 (the study presets set it; 0 by default), a recurrent model
(``experiments.models.is_recurrent``) is also evaluated on the whole test split with its state
carried from token to token (``carried_bits``; the convention of the published Penn Treebank
character results), the split read as ``carried_streams`` contiguous pieces side by side, each
carried from its first token to its last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from experiments.data import DATASETS, load_dataset
from experiments.models import is_recurrent
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
        losses.append(_scored_nats(logits, chunk[:, 1:]))
    return float(np.mean(np.concatenate(losses))) / math.log(2)  # one float64 sum in a fixed order


def _scored_nats(logits, targets):
    """Cross-entropy in nats of every position, float64 on the CPU: ``[B, T, V]``, ``[B, T]`` -> ``[B·T]``."""
    nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return nats.double().cpu().numpy()


class CarriedScore(NamedTuple):
    """``carried_bits``'s result: mean bits per token, and how many chunk boundaries put a drifted
    compact state back on its group (0 for every model that is not a group RNN)."""
    bits: float
    reprojections: int


@torch.no_grad()
def carried_bits(model, stream, length, streams=1):
    """Mean cross-entropy in bits per token over a whole stream with the model's state carried;
    returns a ``CarriedScore``.

    ``stream`` (``[N]`` ids) is cut into ``streams`` contiguous pieces of ⌊(N − 1)/streams⌋ + 1
    tokens (the last few tokens that do not fill a piece are dropped) read side by side as one
    batch; each piece is fed in chunks of ``length`` tokens, every chunk continuing from the cache
    the previous one returned (``logits, cache = model(chunk, cache)``), so the state restarts only
    at the start of a piece. Equal to one forward pass over each whole piece (tested). Over tens of
    thousands of float32 steps round-off can carry a compact group's state past the membership
    tolerance (O(16) on Penn Treebank's test pieces of 27k characters); such a state is put back on
    the group (``group.nearest``, the polar factor for O and U) before the next chunk, as the model's
    ``reproject_every`` would, which leaves every state that stays within the tolerance untouched,
    and counted (``reprojections``: chunk boundaries at which any piece's state was off). A
    carried state that has left a non-compact group (GL: a long product of matrices loses rank in
    float32) or is not finite ends the evaluation with NaN, as a diverged run's score, instead of a
    refused call.
    """
    per_piece = (len(stream) - 1) // streams
    if per_piece < 1:
        raise ValueError(f"stream of {len(stream)} tokens is too short for {streams} pieces")
    pieces = torch.from_numpy(np.stack([stream[i * per_piece:(i + 1) * per_piece + 1] for i in range(streams)]))
    pieces, cache, losses, reprojections = pieces.to(model_device(model)), None, [], 0
    for start in range(0, per_piece, length):
        chunk = pieces[:, start:start + length + 1]
        if cache is not None and hasattr(model, "group") and not model.group.is_member(cache.state):
            if not (model.group.is_compact and torch.isfinite(cache.state).all()):
                return CarriedScore(float("nan"), reprojections)
            cache, reprojections = cache._replace(state=model.group.nearest(cache.state)), reprojections + 1
        logits, cache = model(chunk[:, :-1], cache)
        losses.append(_scored_nats(logits, chunk[:, 1:]))
    return CarriedScore(float(np.mean(np.concatenate(losses))) / math.log(2), reprojections)


@dataclass(frozen=True)
class LanguageModellingConfig:
    """Language modelling on one dataset's streams.

    Attributes:
        dataset: a key of ``experiments.data.DATASETS`` (required).
        length: tokens per training and evaluation window.
        eval_tokens: how many tokens of a split one windowed evaluation reads.
        carried_streams: the pieces of the carried-state test evaluation of a recurrent model (0: none).
    """

    dataset: str | None = None
    length: int = 128
    eval_tokens: int = 50_000
    carried_streams: int = 0

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose one of {sorted(DATASETS)} (--dataset)")
        if isinstance(self.carried_streams, bool) or not isinstance(self.carried_streams, int) \
                or self.carried_streams < 0:
            raise ValueError(f"carried_streams must be a non-negative int, got {self.carried_streams!r}")
        for name in ("length", "eval_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


class LanguageModelling(Task):
    """Next-token prediction on a dataset's streams; ``valid_bits`` and ``test_bits_per_token``."""

    Config = LanguageModellingConfig
    selection_key = "valid_bits"  # windowed

    def __init__(self, config, seed):
        super().__init__(config, seed)
        self.data = load_dataset(config.dataset)
        self._check_windows()

    def _check_windows(self):
        """Refuse, before any training, a window that no split or evaluation can hold (naming the flags)."""
        length, window = self.config.length, self.config.length + 1
        if self.config.eval_tokens < length:
            raise ValueError(f"--length {length} needs windows of {window} tokens, but --eval-tokens "
                             f"{self.config.eval_tokens} evaluates on {self.config.eval_tokens + 1}: raise "
                             f"--eval-tokens to at least {length} or lower --length")
        for split, stream in self.data.streams.items():
            if len(stream) < window:
                raise ValueError(f"--length {length} needs windows of {window} tokens, but the {split} split of "
                                 f"--dataset {self.config.dataset} has {len(stream)}: use --length {len(stream) - 1} "
                                 "or less")
        pieces, test = self.config.carried_streams, len(self.data.streams["test"])
        if pieces and (test - 1) // pieces < 1:
            raise ValueError(f"--carried-streams {pieces} cuts the test split of --dataset {self.config.dataset} "
                             f"({test} tokens) into pieces of no token: use at most {test - 1}")

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
        bits = self.bits(model, "test")
        result = {"test_bits_per_token": bits}
        if self.data.word_level:
            result["test_perplexity"] = 2.0 ** bits
        if self.config.carried_streams and is_recurrent(model):
            carried = carried_bits(model, self.data.streams["test"], self.config.length, self.config.carried_streams)
            result["test_carried_bits_per_token"] = carried.bits
            result["test_carried_reprojections"] = carried.reprojections
        return result

    def train_metrics(self, loss):
        return {"train_bits": loss / math.log(2)}


TASKS = {"lm": LanguageModelling}
