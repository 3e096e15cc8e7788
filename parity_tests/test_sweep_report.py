"""Sweeps (local process pool, skip finished runs, survive a failing one), reports and statistics."""

import json
import math
import subprocess
import sys

import pytest
import scipy.stats

from experiments.report import arm_of, report
from experiments.stats import format_interval, mean_ci, paired_difference_ci
from experiments.sweep import run_sweep


def test_mean_ci_on_known_values():
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.302652729911275 / math.sqrt(3))  # t_{0.975, 2} · s / √3, s = 1
    assert math.isnan(mean_ci([5.0])[1])
    mean, half = paired_difference_ci([3.0, 5.0, 7.0, 9.0], [1.0, 2.0, 3.0, 4.0])  # differences 2, 3, 4, 5
    assert mean == 3.5
    assert half == pytest.approx(scipy.stats.t.ppf(0.975, 3) * math.sqrt(5 / 3) / 2)
    with pytest.raises(ValueError, match="equal shapes"):
        paired_difference_ci([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="non-empty"):
        mean_ci([])


SWEEP = '''
from experiments.sweep_run import SweepRun

TINY = {"dataset": "ptb_char", "group": "SO", "n": 3, "embedding_dim": 4, "steps": 3, "batch": 2, "length": 8,
        "eval_every": 3, "eval_tokens": 50, "checkpoint_every": 3}
RUNS = [SweepRun(f"so3-seed{seed}", "group_rnn", "lm", {**TINY, "seed": seed}) for seed in (0, 1)]
RUNS.append(SweepRun("broken-seed0", "group_rnn", "lm", {**TINY, "group": "Sp"}))
'''


def test_sweep_runs_skips_and_survives_a_failure_and_the_report_summarizes(tmp_path):
    sweep = tmp_path / "tiny.py"
    sweep.write_text(SWEEP)
    out = tmp_path / "runs"
    status = run_sweep(sweep, out, workers=2)
    assert {name: s["status"] for name, s in status.items()} == {
        "so3-seed0": "done", "so3-seed1": "done", "broken-seed0": "failed"}
    assert "unknown group 'Sp'" in (out / "broken-seed0" / "error.txt").read_text()
    assert json.loads((out / "sweep-tiny.json").read_text())["runs"]["broken-seed0"]["status"] == "failed"

    again = run_sweep(sweep, out, workers=1)
    assert again["so3-seed0"]["status"] == "skipped (complete)" and again["broken-seed0"]["status"] == "failed"

    cli = subprocess.run([sys.executable, "-m", "experiments.sweep", str(sweep), "--out", str(out)],
                         capture_output=True, text=True, check=False)
    assert cli.returncode == 1 and json.loads(cli.stdout.splitlines()[-1]) == {"runs": 3, "failed": ["broken-seed0"]}

    markdown = report(out)
    assert "| so3 | 2 |" in markdown and "±" in markdown and "broken" not in markdown
    assert (out / "report_curves.png").stat().st_size > 0 and (out / "report_drift.png").stat().st_size > 0
    assert arm_of("o-rnn-seed12") == "o-rnn"


@pytest.mark.parametrize("name, vocab_size", [("charlm_ptb", 50), ("charlm_shakespeare", 65)])
def test_the_study_sweeps_hold_matched_arms(name, vocab_size):
    from experiments.params_budget import TOLERANCE, parameter_count
    from experiments.sweeps import load_runs
    from experiments.sweeps.charlm import BUDGET, SEEDS
    from experiments.train import build_config

    runs = load_runs(f"experiments.sweeps.{name}")
    assert len(runs) == 12 * len(SEEDS)
    for run in runs[::len(SEEDS)]:
        config = build_config(run.model, run.task, run.options)  # the config the sweep trains
        assert config.model.vocab_size == vocab_size
        count = parameter_count(config.model)
        assert abs(count - BUDGET) <= TOLERANCE * BUDGET, run.name


def test_the_paper_preset_sizes_every_arm_to_two_million_and_asks_for_cuda():
    from experiments.params_budget import TOLERANCE, parameter_count
    from experiments.sweeps import load_sweep
    from experiments.train import build_config

    sweep = load_sweep("paper")
    assert sweep.needs_cuda and len(sweep.runs) == 12 * 5 * 2
    for run in sweep.runs[::5]:
        assert run.options["steps"] == 8000 and run.options["device"] == "auto"  # resolved when the run starts
        config = build_config(run.model, run.task, run.options)
        vocab_size = {"ptb_char": 50, "tinyshakespeare": 65}[run.options["dataset"]]
        assert config.model.vocab_size == vocab_size
        count = parameter_count(config.model)
        assert abs(count - 2_000_000) <= TOLERANCE * 2_000_000, run.name


def test_report_counts_diverged_runs_instead_of_averaging_them():
    assert format_interval([float("nan"), float("nan")]) == "diverged (2/2)"
    assert format_interval([2.0, float("nan")]) == "2.0000 (one run); 1/2 diverged"
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert format_interval([1.0, 2.0, 3.0]) == f"{mean:.4f} ± {half:.4f}"


def test_the_ray_executor_runs_the_same_sweep_on_a_local_ray(tmp_path):
    """The real engine: Ray starts locally, runs each SweepRun as a task, a failure is recorded."""
    sweep = tmp_path / "tiny.py"
    sweep.write_text(SWEEP)
    out = tmp_path / "runs"
    status = run_sweep(sweep, out, workers=2, executor="ray")
    assert {name: s["status"] for name, s in status.items()} == {
        "so3-seed0": "done", "so3-seed1": "done", "broken-seed0": "failed"}
    assert (out / "so3-seed1" / "final.json").exists()
    assert "unknown group 'Sp'" in (out / "broken-seed0" / "error.txt").read_text()
    with pytest.raises(ValueError, match="unknown executor"):
        run_sweep(sweep, out, executor="dask")


def test_a_task_without_its_own_report_gets_every_final_metric_over_seeds(tmp_path):
    for seed, accuracy in ((0, 0.5), (1, 0.7)):
        run = tmp_path / f"words-S5-seed{seed}"
        run.mkdir()
        run.joinpath("config.json").write_text(json.dumps(
            {"train": {"model": "lstm", "task": "words", "seed": seed}, "task": {"group": "S5"}, "model": {}}))
        run.joinpath("final.json").write_text(json.dumps({"steps": 4, "test_accuracy@128": accuracy,
                                                          "parameters": 100, "test_split": "test"}))
        run.joinpath("metrics.jsonl").write_text(json.dumps({"step": 4, "valid_accuracy@64": accuracy}) + "\n")
    markdown = report(tmp_path)
    half = scipy.stats.t.ppf(0.975, 1) * math.sqrt(0.02) / math.sqrt(2)  # sample sd of (0.5, 0.7): √0.02
    assert "| arm | runs | test_accuracy@128 | parameters |" in markdown
    assert f"| words-S5 | 2 | 0.6000 ± {half:.4f} | 100.0000 ± 0.0000 |" in markdown
    assert (tmp_path / "report_valid_accuracy@64.png").stat().st_size > 0
