"""The state-tracking and copy presets and their report: every run builds,
every arm sits at its task's budget, a tiny version of each preset trains end to end, and the report's
figures match hand-computed values on hand-written runs."""

import json
import math

import pytest

from experiments.models import build_model
from experiments.params_budget import count_parameters
from experiments.studies.state_tracking import copy as copy_preset
from experiments.studies.state_tracking import state_tracking
from experiments.studies.state_tracking.arms import COARSE_TOLERANCE, GPT_POSITION_SCHEMES, MLSTM_TOLERANCE
from experiments.studies.state_tracking.report import cell_and_arm, report
from experiments.sweep import run_sweep
from experiments.sweeps import load_sweep
from experiments.tasks.copy import Copy
from experiments.tasks.copy import baseline_loss
from experiments.training.config import build_config

ARMS = {f"rnn-{g}-{kind}" for g in ("SO", "U", "T", "BO") for kind in ("input", "rec")} | {
    "lstm", "gpt-learned", "mlstm-plain", "mlstm-ns", "gtf-SO"} | {f"gpt-{s}" for s in GPT_POSITION_SCHEMES}


def _meta_count(run):
    """Parameters of a run's model, built on the meta device and counted entry by entry."""
    return count_parameters(build_model(build_config(run.model, run.task, run.options).model, device="meta"))


@pytest.fixture(scope="module")
def presets():
    return {name: load_sweep(name).runs for name in ("state-tracking", "copy")}


def test_state_tracking_preset_covers_every_cell_arm_and_seed_at_the_budget(presets):
    runs = presets["state-tracking"]
    cells = {}
    for run in runs:
        cell, arm = cell_and_arm(run.name)
        cells.setdefault(cell, {}).setdefault(arm, []).append(run)
    assert set(cells) == {"parity", "mod3", "S3", "A5", "S5"}
    for cell, arms in cells.items():
        remedies = {f"rnn-{g}-input-{remedy}" for g in ("SO", "U", "T", "BO") for remedy in ("curriculum", "spread")}
        assert set(arms) == ARMS | remedies, cell
        budget = state_tracking.CELLS[cell][3]
        for arm, arm_runs in arms.items():
            assert sorted(r.options["seed"] for r in arm_runs) == [0, 1, 2]
            first = arm_runs[0]
            assert first.options["steps"] == state_tracking.STEPS
            assert first.options.get("curriculum_steps", 0) == (state_tracking.CURRICULUM_STEPS
                                                                if arm.endswith("-curriculum") else 0)
            config = build_config(first.model, first.task, first.options)
            assert config.task.eval_lengths == (64, 128, 256, 512, 1024)
            count = _meta_count(first)
            if arm == "gpt-learned":  # matched at the training length; positions 64…1023 never train
                assert config.model.max_length == 1024
                count -= (1024 - 64) * config.model.width
            tolerance = MLSTM_TOLERANCE if arm.startswith("mlstm") else 0.02
            assert abs(count - budget) <= tolerance * budget, (cell, arm, count)
    first_seeds = [r.options["seed"] for r in runs[: len(runs) // 3]]
    assert set(first_seeds) == {0}  # seed-major: one worker finishes seed 0 everywhere first


def test_copy_preset_covers_every_delay_at_the_budget(presets):
    runs = presets["copy"]
    delays = {}
    for run in runs:
        cell, arm = cell_and_arm(run.name)
        delays.setdefault(cell, set()).add(arm)
        assert run.options["delay"] == int(cell[1:])
        count = _meta_count(run)
        tolerance = COARSE_TOLERANCE if arm == "gpt-learned" else MLSTM_TOLERANCE if arm.startswith("mlstm") else 0.02
        assert abs(count - copy_preset.BUDGET) <= tolerance * copy_preset.BUDGET, (run.name, count)
    assert set(delays) == {"T100", "T500", "T1000", "T2000"}
    assert delays["T100"] == ARMS and delays["T2000"] == ARMS - {"mlstm-ns"}
    assert copy_preset.steps(100) == round(240_000 / (8 * 120)) and copy_preset.steps(2000) == copy_preset.MIN_STEPS
    sweep = load_sweep("copy")  # each (delay, arm) picks its rate on validation loss before its seeds train
    assert sweep.tuning.rates == (1e-3, 1e-2) and Copy.selection_key == "valid_loss"
    assert len(runs) == 3 * sum(len(arms) for arms in delays.values())


TINY = '''
from experiments.studies.state_tracking import copy, state_tracking

RUNS = [run for run in state_tracking.runs(cells={"parity": ("count", {"modulus": 2}, 2, 3000)}, seeds=(0,),
                                            steps=2, batch=2, eval_sequences=2, curriculum_steps=1,
                                            test_length=128)
        if run.name.split("-seed")[0] in ("parity-lstm", "parity-rnn-SO-input-curriculum")]
RUNS += [run for run in copy.runs(delays=(3,), seeds=(0, 1), tokens=1, min_steps=2, eval_sequences=2,
                                  copy_length=2) if "-lstm-" in run.name]
'''


def test_tiny_presets_train_and_report(tmp_path):
    sweep = tmp_path / "tiny.py"
    sweep.write_text(TINY)
    out = tmp_path / "runs"
    status = run_sweep(sweep, out, workers=1)
    assert {s["status"] for s in status.values()} == {"done"} and len(status) == 4
    markdown = report(out)
    assert "## parity" in markdown and "## T3" in markdown and "rnn-SO-input-curriculum" in markdown
    table = json.loads((out / "tracking_table.json").read_text())
    copy_row = next(r for r in table if r["cell"] == "T3")
    assert copy_row["seeds"] == [0, 1] and copy_row["baseline_loss"] == pytest.approx(2 * math.log(8) / 7)
    for name in ("tracking_parity.png", "tracking_copy.png", "tracking_table.csv", "tracking_report.md"):
        assert (out / name).stat().st_size > 0


def _write_run(root, name, task, train_max_length, final, seed):
    run = root / name
    run.mkdir()
    task_config = {"delay": 20, "copy_length": 10} if task == "copy" else {"train_max_length": train_max_length}
    (run / "config.json").write_text(json.dumps({"train": {"task": task, "model": "lstm", "seed": seed},
                                                 "task": task_config, "model": {}}))
    (run / "final.json").write_text(json.dumps({"parameters": 100, "train_seconds": 1.0, **final}))


def test_report_figures_on_hand_written_runs(tmp_path):
    accuracies = [(1.0, 0.995, 0.9), (1.0, 0.989, 0.5), (0.8, 0.7, 0.6)]  # at 32, 64, 128; trained on ≤ 16
    for seed, values in enumerate(accuracies):
        final = {f"test_accuracy@{n}": a for n, a in zip((32, 64, 128), values)}
        _write_run(tmp_path, f"parity-lstm-seed{seed}", "count", 16, final, seed)
    baseline = baseline_loss(20)
    for seed, loss in enumerate((0.5 * baseline, 1.5 * baseline)):
        _write_run(tmp_path, f"T20-lstm-seed{seed}", "copy", None,
                   {"test_loss": loss, "test_baseline_loss": baseline, "test_recall_accuracy": 0.25 * seed}, seed)
    report(tmp_path)
    rows = {r["cell"]: r for r in json.loads((tmp_path / "tracking_table.json").read_text())}
    parity = rows["parity"]
    assert parity["solved"] == 1  # 4 × 16 = 64: only 0.995 reaches 99%
    assert parity["accuracy"]["128"] == pytest.approx((0.9 + 0.5 + 0.6) / 3)
    assert parity["accuracy_min"]["64"] == 0.7 and parity["accuracy_max"]["32"] == 1.0
    copy_row = rows["T20"]
    assert copy_row["loss_over_baseline"] == pytest.approx(1.0) and copy_row["below_baseline"] == 1
    assert copy_row["recall_accuracy"] == pytest.approx(0.125)
    assert copy_row["test_loss_ci"] == pytest.approx(12.706204736 * 0.5 * baseline)  # t_{.975,1}·s/√2, s = b/√2
    assert "| lstm | 3 |" in (tmp_path / "tracking_report.md").read_text()
    with pytest.raises(ValueError, match="cell"):
        cell_and_arm("lstm-seed0")
