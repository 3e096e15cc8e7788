"""The copy, count and words tasks behind the task interface (experiments/tasks/{copy_task,counting,
word_problems,length_generalization}.py): lengths, curriculum, and metrics checked with oracle
models whose scores are known in closed form (the contract and the smoke runs of every model are in
test_tasks.py)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from experiments.tasks import task_class
from experiments.tasks.count import count_example
from experiments.tasks.copy import BLANK, baseline_loss
from experiments.tasks.words import permutation_group, word_example
from parity_tests.test_exact_construction import torch_model


class Oracle(nn.Module):
    """Logits that put ``confidence`` on ``answer(inputs)`` (a NumPy function of the whole input)."""

    def __init__(self, answer, vocab_size, confidence=50.0):
        super().__init__()
        self.answer, self.vocab_size, self.confidence = answer, vocab_size, confidence
        self.anchor = nn.Parameter(torch.zeros(()))  # a device for model_device

    def forward(self, tokens):
        labels = torch.from_numpy(self.answer(tokens.numpy()))
        return self.confidence * nn.functional.one_hot(labels, self.vocab_size).double(), None


def build(name, **options):
    cls = task_class(name)
    return cls(cls.Config(**options), seed=0)


def test_default_lengths_are_the_study_lengths():
    assert build("count").config.eval_lengths == (64, 128, 256, 512, 1024)
    assert build("words", train_max_length=4, eval_max_length=20).config.eval_lengths == (4, 8, 16)


def test_evaluation_sets_are_fixed_and_independent_per_split():
    task = build("words", word_group="S5", train_max_length=8, eval_max_length=32, eval_sequences=16)
    valid, test = task.evaluation_sets("valid"), task.evaluation_sets("test")
    again = build("words", word_group="S5", train_max_length=8, eval_max_length=32, eval_sequences=16)
    assert list(valid) == [8, 16, 32]
    for length in valid:
        assert valid[length][0].shape == (16, length)
        assert np.array_equal(valid[length][0], again.evaluation_sets("valid")[length][0])
        assert not np.array_equal(valid[length][0], test[length][0])
    inputs, _ = task.train_batch(np.random.default_rng(0), 16, step=0)
    assert not any(np.array_equal(inputs.numpy(), v[0]) for v in valid.values() if v[0].shape == inputs.shape)


def test_training_lengths_follow_the_curriculum():
    task = build("words", word_group="S3", train_min_length=2, train_max_length=10, curriculum_steps=4)
    generator = np.random.default_rng(0)
    lengths = {step: {task.train_batch(generator, 2, step)[0].shape[1] for _ in range(200)} for step in (0, 2, 4, 9)}
    assert lengths == {0: {2}, 2: set(range(2, 7)), 4: set(range(2, 11)), 9: set(range(2, 11))}


@pytest.mark.parametrize("name, options, answer", [
    ("count", {"modulus": 3}, lambda x: count_example(x, 3)[1]),
    ("words", {"word_group": "A5"}, lambda x: word_example(permutation_group("A5"), x)[1]),
], ids=["count-mod3", "words-A5"])
def test_oracle_scores_one_and_a_constant_scores_chance(name, options, answer):
    task = build(name, train_max_length=16, eval_max_length=64, eval_sequences=50, **options)
    perfect = task.evaluate(Oracle(answer, task.vocab_size), "test")
    assert set(perfect) == {f"test_{kind}@{n}" for kind in ("accuracy", "last_accuracy") for n in (16, 32, 64)}
    assert all(v == 1.0 for v in perfect.values())
    constant = task.evaluate(Oracle(lambda x: np.zeros_like(x), task.vocab_size), "valid")
    for length, (inputs, targets) in task.evaluation_sets("valid").items():
        assert constant[f"valid_accuracy@{length}"] == pytest.approx(np.mean(targets == 0), abs=1e-12)


def test_exact_so5_construction_solves_the_words_task_at_every_length():
    task = build("words", word_group="S5", eval_sequences=8)
    metrics = task.evaluate(torch_model(permutation_group("S5"), torch.float64), "test")
    assert len(metrics) == 10 and all(v == 1.0 for v in metrics.values())


def test_copy_metrics_of_the_memoryless_and_the_perfect_predictor():
    task = build("copy", delay=30, copy_length=10, eval_sequences=20)
    length, recall = 50, 10

    class Memoryless(nn.Module):
        """Blank (certain) until the recall positions, uniform over the 8 symbols there."""

        def __init__(self):
            super().__init__()
            self.anchor = nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            logits = torch.full(tokens.shape + (10,), -1e9, dtype=torch.float64)
            logits[:, :length - recall, BLANK] = 0.0
            logits[:, length - recall:, 1:9] = 0.0
            return logits, None

    metrics = task.evaluate(Memoryless(), "valid")
    assert metrics["valid_baseline_loss"] == baseline_loss(30) == pytest.approx(10 * math.log(8) / 50)
    assert metrics["valid_loss"] == pytest.approx(metrics["valid_baseline_loss"], rel=1e-12)

    def copy_answer(inputs):
        targets = np.zeros_like(inputs)
        targets[:, -recall:] = inputs[:, :recall]
        return targets

    perfect = task.evaluate(Oracle(copy_answer, 10), "test")
    assert perfect["test_recall_accuracy"] == 1.0 and perfect["test_loss"] < 1e-15


@pytest.mark.parametrize("name, options", [
    ("count", {"modulus": 1}),
    ("count", {"train_min_length": 8, "train_max_length": 4}),
    ("count", {"train_max_length": 64, "eval_max_length": 32}),
    ("words", {"word_group": "S4"}),
    ("copy", {"delay": -1}),
    ("copy", {"copy_length": 0}),
], ids=["modulus-1", "min-above-max", "eval-below-train", "unknown-group", "negative-delay", "no-symbols"])
def test_configs_refuse_bad_values(name, options):
    with pytest.raises(ValueError):
        task_class(name).Config(**options)
