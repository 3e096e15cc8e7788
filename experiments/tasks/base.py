"""The task interface of ``experiments.train``: what a task is, as one base class.

What the training loop asks of a task, and how a new task joins the registry: ``Task``.
"""

from __future__ import annotations

import abc

import numpy as np

from manifold_impl.losses import IGNORE_INDEX

__all__ = ["IGNORE_INDEX", "SPLIT_SEED_OFFSETS", "Task", "model_device", "split_generator"]

SPLIT_SEED_OFFSETS = {"valid": 1_000_003, "test": 2_000_003}  # evaluation streams: seed + offset


class Task(abc.ABC):
    """Base class of the training tasks.

    A task is a frozen config dataclass (``Task.Config``) and a class built from it and the run's seed.
    The training loop asks it for three things:

    * ``train_batch(generator, batch, step)``: the next training batch, ``(inputs, targets)``, two
      ``[B, T]`` int64 tensors; a target of ``IGNORE_INDEX`` is not scored (a label at every position,
      or only at some). ``generator`` is the run's ``numpy.random.Generator`` (its state is
      checkpointed, so the stream resumes exactly); ``step`` (0-based) lets a task change with
      training, for example a length curriculum, and ``T`` may change from batch to batch.
    * ``evaluate(model, split)``: a dict of named values for ``split`` (``"valid"`` at every
      evaluation, written to ``metrics.jsonl``; ``"test"`` once at the end, written to
      ``final.json``), for example one accuracy per test length (``valid_accuracy@256``) or a
      baseline next to a loss. Evaluation data are fixed by the seed given at construction and drawn
      from ``split_generator(seed, split)``, independent of the training stream (``seed``). The loop
      calls it in evaluation mode without gradients; models are called as ``logits, _ = model(tokens)``.
    * ``train_metrics(loss)``: how the training loss (mean nats per scored position) is recorded.
    * ``train_length``: the longest T of a training batch, which bounds a step's memory (the
      default draws one batch of one sequence; a task whose T varies gives its maximum).
    * ``selection_key`` (optional, a class attribute): the validation metric that model selection
      minimises, over a run's evaluations (the best checkpoint, whose test metrics are reported) and
      over a sweep's learning rates (``experiments.tuning``). The default, None, keeps the last model.

    ``vocab_size`` is the size of the token space the model reads and predicts (inputs and targets),
    so the loop sizes the model's embedding and readout to it. A new task is one file in
    ``experiments/tasks/`` that defines ``TASKS = {name: TaskClass}``: the registry
    (``experiments.tasks.task_classes``) finds it there, ``python -m experiments.train --task name``
    trains any model on it, and ``experiments.report`` reports it (``metrics_report``) unless it has a
    report of its own.
    """

    Config: type = None  # a frozen dataclass that validates itself in __post_init__
    selection_key: str | None = None  # the validation metric model selection minimises (None: keep the last)

    def __init__(self, config, seed):
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} takes a {self.Config.__name__}, got {type(config).__name__}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.config, self.seed = config, seed

    @property
    @abc.abstractmethod
    def vocab_size(self):
        """Tokens the model reads and predicts."""

    @abc.abstractmethod
    def train_batch(self, generator, batch, step):
        """``(inputs, targets)``: ``[batch, T]`` int64 tensors, ``IGNORE_INDEX`` where not scored."""

    @abc.abstractmethod
    def evaluate(self, model, split):
        """``{metric name: float}`` of ``model`` on ``split`` (``"valid"`` or ``"test"``)."""

    def train_metrics(self, loss):
        """``{"train_loss": loss}`` (nats); a task may report it in other units."""
        return {"train_loss": loss}

    @property
    def train_length(self):
        """The longest T of a training batch ``[batch, T]``: here that of one drawn batch."""
        inputs, _ = self.train_batch(np.random.default_rng(self.seed), 1, 0)
        return inputs.shape[1]


def model_device(model):
    """The device of a model's parameters (where evaluation batches go)."""
    return next(model.parameters()).device


def split_generator(seed, split):
    """The generator of ``split``'s evaluation data: seeded ``seed + SPLIT_SEED_OFFSETS[split]``."""
    if split not in SPLIT_SEED_OFFSETS:
        raise ValueError(f"split must be one of {sorted(SPLIT_SEED_OFFSETS)}, got {split!r}")
    return np.random.default_rng(seed + SPLIT_SEED_OFFSETS[split])
