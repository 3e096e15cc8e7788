"""Noisy-recall training runs (``experiments.studies.noisy_recall.train``): a few-step smoke run of
both reads."""

import json

import pytest

from experiments.studies.noisy_recall.train import main
from experiments.training.config import TrainConfig, build_config
from experiments.training.optim import learning_rate_factor

TINY = ["--vocab-size", "24", "--length", "16", "--steps", "4", "--batch", "4", "--valid-sequences", "6",
        "--eval-every", "2"]


@pytest.mark.parametrize("read, schedule", [("plain", "cosine"), ("ns", "constant")])
def test_a_few_steps_of_each_read_write_the_run(tmp_path, read, schedule):
    directory = tmp_path / read
    assert main([*TINY, "--read", read, "--schedule", schedule, "--run-dir", str(directory)]) == 0
    metrics = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [2, 4]
    assert all(0.0 <= m["valid_accuracy"] <= 1.0 for m in metrics)
    assert json.loads((directory / "config.json").read_text())["model"]["read"] == read
    assert json.loads((directory / "final.json").read_text())["valid_accuracy"] == metrics[-1]["valid_accuracy"]


def test_the_same_seed_repeats_the_run(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for directory in (first, second):
        main([*TINY, "--seed", "3", "--run-dir", str(directory)])
    assert (first / "metrics.jsonl").read_text() == (second / "metrics.jsonl").read_text()


@pytest.mark.parametrize("fields, message", [
    ({"length": 15}, "length"), ({"frac_noise": 1.0}, "frac_noise"), ({"read": "svd"}, "read"),
    ({"schedule": "linear"}, "schedule"), ({"steps": 0}, "steps"),
], ids=["odd-length", "frac-noise", "read", "schedule", "steps"])
def test_invalid_runs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        build_config("mlstm", "recall", fields)


def test_schedules():
    cosine = TrainConfig(model="mlstm", task="recall", steps=10)
    constant = TrainConfig(model="mlstm", task="recall", steps=10, schedule="constant")
    assert learning_rate_factor(cosine, 0) == 1.0 and learning_rate_factor(cosine, 10) == pytest.approx(0.0)
    assert learning_rate_factor(cosine, 5) == pytest.approx(0.5)
    assert {learning_rate_factor(constant, s) for s in range(10)} == {1.0}


def test_the_command_line_records_the_command_and_the_revision(tmp_path):
    from experiments.studies.noisy_recall.train import main

    argv = ["--vocab-size", "24", "--length", "16", "--steps", "2", "--batch", "2", "--valid-sequences", "2",
            "--eval-every", "1", "--embedding-dim", "8", "--run-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    assert (tmp_path / "run" / "command.txt").read_text().split()[1:7] == [
        "-m", "experiments.train", "--model", "mlstm", "--task", "recall"]  # the preset's full command
    revision = (tmp_path / "run" / "git_revision.txt").read_text().strip()
    assert revision == "unknown" or len(revision) == 40
