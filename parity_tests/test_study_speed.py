"""The quiet per-arm throughput of a study sweep (experiments.bench.study_speed) and its use in the report."""

import json
import math

from experiments.bench import study_speed
from experiments.report import table

SWEEP = '''
from experiments.studies.charlm_v2.recipe import runs

TINY = {"steps": 4, "batch": 2, "length": 8, "lr": 1e-3, "eval_every": 2, "eval_tokens": 48, "checkpoint_every": 2,
        "carried_streams": 5000, "device": "auto"}
RUNS = [run for run in runs("ptb_char", 50, budget=60_000, training=TINY, seeds=(0, 1))
        if run.name.startswith(("lstm-", "rnn-O-seed"))]
'''


def test_each_arm_trains_in_turns_and_the_median_and_ratio_are_saved(tmp_path):
    sweep = tmp_path / "tiny.py"
    sweep.write_text(SWEEP)
    out = tmp_path / "speed.json"
    assert study_speed.main([str(sweep), "--seconds", "0.3", "--rounds", "3", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert list(record["arms"]) == ["lstm", "rnn-O"] and record["machine"]["cpus"] >= 1
    for arm in record["arms"].values():
        assert len(arm["rounds"]) == 3 and all(rate > 0 and math.isfinite(rate) for rate in arm["rounds"])
        assert arm["tokens_per_second"] == sorted(arm["rounds"])[1]
    lstm, group = (record["arms"][arm]["tokens_per_second"] for arm in ("lstm", "rnn-O"))
    assert record["arms"]["lstm"]["ratio_to_first"] == 1.0
    assert math.isclose(record["arms"]["rnn-O"]["ratio_to_first"], group / lstm)


def test_the_report_takes_the_quiet_speed_over_the_runs_own():
    run = {"final": {"test_bits_per_token": 2.0, "parameters": 10, "tokens_per_second": 5.0, "train_seconds": 1.0,
                     "best_step": 2, "steps": 4}, "config": {"train": {"lr": 0.01}}}
    arms = {"lstm": [run, run]}
    assert "| 5 | 1 |" in table(arms) and "beside other runs" in table(arms)
    assert "| 1,234 | 1 |" in table(arms, {"lstm": 1234.0}) and "speed.json" in table(arms, {"lstm": 1234.0})
