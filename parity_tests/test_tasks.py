"""The task interface (experiments/tasks/base.py): every registered task keeps its contract, and every
model trains a few steps on every task through the one loop.

A new task adds its smallest useful options to ``SMOKE``; the first test fails until it does.
"""

import json

import numpy as np
import pytest
import torch

from experiments.models import MODEL_CONFIGS, build_model
from experiments.tasks import task_class, task_classes
from experiments.tasks.base import IGNORE_INDEX, Task
from experiments.training import loop
from experiments.training.config import build_config

SMOKE = {  # per task: tiny task options
    "lm": {"dataset": "ptb_char", "length": 8, "eval_tokens": 40},
    "recall": {"vocab_size": 24, "length": 16, "valid_sequences": 4},
    "copy": {"delay": 3, "copy_length": 2, "eval_sequences": 4},
    "count": {"modulus": 3, "train_max_length": 4, "eval_max_length": 16, "eval_sequences": 4},
    "words": {"word_group": "S3", "train_max_length": 4, "curriculum_steps": 2, "eval_max_length": 16,
              "eval_sequences": 4},
}
TINY_MODELS = {  # per model: tiny model options
    "group_rnn": {"group": "SO", "n": 3, "embedding_dim": 4},
    "group_transformer": {"group": "O", "n": 2, "num_layers": 1, "num_heads": 1},
    "mlstm": {"embedding_dim": 8},
    "lstm": {"hidden_size": 4},
    "exprnn": {"hidden_size": 4},
    "gpt": {"width": 4, "num_layers": 1, "num_heads": 1, "max_length": 16},
}


def test_every_task_and_model_has_smoke_options():
    assert {"lm", "recall"} <= set(task_classes())
    assert set(SMOKE) == set(task_classes())
    assert set(TINY_MODELS) == set(MODEL_CONFIGS)
    with pytest.raises(ValueError, match="unknown task 'copy-paste'"):
        task_class("copy-paste")


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_a_task_keeps_the_contract(name):
    cls = task_class(name)
    assert issubclass(cls, Task)
    task = cls(cls.Config(**SMOKE[name]), seed=3)
    vocab = task.vocab_size
    batches = [task.train_batch(np.random.default_rng(11), 5, step=0) for _ in range(2)]
    for inputs, targets in batches:
        assert inputs.dtype == targets.dtype == torch.int64 and inputs.shape == targets.shape
        assert inputs.shape[0] == 5 and inputs.min() >= 0 and inputs.max() < vocab
        scored = targets[targets != IGNORE_INDEX]
        assert scored.numel() > 0 and scored.min() >= 0 and scored.max() < vocab
    assert all(torch.equal(a, b) for a, b in zip(*batches))  # the generator alone decides the batch
    generator = np.random.default_rng(11)
    first, second = task.train_batch(generator, 5, 0), task.train_batch(generator, 5, 1)
    assert not torch.equal(first[0], second[0])  # the stream moves on

    config = build_config("lstm", name, {**SMOKE[name], "hidden_size": 4})
    assert config.model.vocab_size == vocab  # the loop sizes the model to the task
    lstm = build_model(config.model, generator=torch.Generator().manual_seed(0))
    again = cls(cls.Config(**SMOKE[name]), seed=3)
    for split in ("valid", "test"):
        metrics = task.evaluate(lstm, split)
        assert metrics and all(isinstance(v, (float, str)) for v in metrics.values())
        assert metrics == again.evaluate(lstm, split)  # evaluation data are fixed by the seed
    with pytest.raises(ValueError, match="split"):
        task.evaluate(lstm, "train")
    with pytest.raises(TypeError, match="takes a"):
        cls(object(), seed=0)


@pytest.mark.parametrize("task", sorted(SMOKE))
@pytest.mark.parametrize("model", sorted(TINY_MODELS))
def test_every_model_trains_on_every_task(tmp_path, model, task):
    options = {**SMOKE[task], **TINY_MODELS[model], "steps": 2, "batch": 2, "eval_every": 2}
    final = loop.run(build_config(model, task, options), tmp_path / "run")
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [2] and final["steps"] == 2
    assert all(np.isfinite(v) for k, v in final.items() if isinstance(v, float))
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["task"] == task


def test_split_generators_are_fixed_and_distinct():
    from experiments.tasks.base import split_generator

    draws = {split: split_generator(5, split).integers(0, 2**62, size=4).tolist() for split in ("valid", "test")}
    assert draws["valid"] != draws["test"]
    assert draws["valid"] != np.random.default_rng(5).integers(0, 2**62, size=4).tolist()  # not the training stream
    assert draws["valid"] == np.random.default_rng(5 + 1_000_003).integers(0, 2**62, size=4).tolist()
    with pytest.raises(ValueError, match="split"):
        split_generator(5, "train")
