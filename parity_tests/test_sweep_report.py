"""Sweeps (local process pool, skip finished runs, survive a failing one), reports and statistics."""

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import scipy.stats

from experiments.analysis.stats import format_interval, mean_ci, paired_difference_ci
from experiments.report import arm_of, report
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


def test_running_a_finished_sweep_again_changes_no_file(tmp_path):
    sweep = tmp_path / "done.py"
    sweep.write_text(SWEEP.replace('RUNS.append(SweepRun("broken-seed0"', '_ = (SweepRun("broken-seed0"'))
    out = tmp_path / "runs"
    assert {s["status"] for s in run_sweep(sweep, out, workers=1).values()} == {"done"}
    files = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    assert {s["status"] for s in run_sweep(sweep, out, workers=1).values()} == {"skipped (complete)"}
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == files


def test_a_sweep_without_out_writes_under_runs_not_into_its_studys_results(tmp_path, monkeypatch):
    import experiments.sweep

    sweep = tmp_path / "study.py"
    sweep.write_text(SWEEP + 'OUT = "experiments/results/study"\n')
    stages = []
    monkeypatch.setattr(experiments.sweep, "_run_stage", lambda runs, out, *args, **kwargs: stages.append(out) or {
        run.name: {"name": run.name, "status": "done"} for run in runs})
    run_sweep(sweep, workers=1)
    assert stages == [Path("runs") / "study"]


def kill_the_worker_holding(lock, stop):
    """SIGKILL the child process of this one that holds ``lock`` open (a run's run.lock: it is training it)."""
    while not stop.is_set():
        for children in Path("/proc/self/task").glob("*/children"):
            for pid in children.read_text().split():
                try:
                    if any(os.readlink(fd) == str(lock) for fd in Path(f"/proc/{pid}/fd").iterdir()):
                        os.kill(int(pid), signal.SIGKILL)
                        return
                except OSError:  # it ended meanwhile
                    pass
        time.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds the worker through Linux's /proc")
def test_a_killed_worker_fails_its_own_run_and_the_sweep_goes_on(tmp_path):
    """kill -9 of the worker training one run (it would train for hours): that run fails with an
    error.txt saying so, the sweep records it, and every other run is trained."""
    sweep = tmp_path / "tiny.py"
    sweep.write_text(SWEEP.replace('{**TINY, "group": "Sp"}', '{**TINY, "steps": 10**7, "eval_every": 10**7}')
                     + 'RUNS.append(SweepRun("so3-seed2", "group_rnn", "lm", {**TINY, "seed": 2}))\n')
    out = tmp_path / "runs"
    stop = threading.Event()
    killer = threading.Thread(target=kill_the_worker_holding, args=(out / "broken-seed0" / "run.lock", stop))
    killer.start()
    try:
        status = run_sweep(sweep, out, workers=2)
    finally:
        stop.set()
        killer.join()
    assert {name: s["status"] for name, s in status.items()} == {
        "so3-seed0": "done", "so3-seed1": "done", "broken-seed0": "failed", "so3-seed2": "done"}
    assert "died (signal SIGKILL)" in (out / "broken-seed0" / "error.txt").read_text()
    assert json.loads((out / "sweep-tiny.json").read_text())["runs"]["broken-seed0"]["status"] == "failed"
    assert all((out / f"so3-seed{seed}" / "final.json").exists() for seed in (0, 1, 2))


@pytest.mark.parametrize("name, vocab_size", [("charlm_ptb", 50), ("charlm_shakespeare", 65)])
def test_the_study_sweeps_hold_matched_arms(name, vocab_size):
    from experiments.params_budget import TOLERANCE, parameter_count
    from experiments.studies.charlm_early.recipe import BUDGET, SEEDS
    from experiments.sweeps import load_runs
    from experiments.training.config import build_config

    runs = load_runs(f"experiments.studies.charlm_early.{name}")
    assert len(runs) == 12 * len(SEEDS)
    for run in runs[::len(SEEDS)]:
        config = build_config(run.model, run.task, run.options)  # the config the sweep trains
        assert config.model.vocab_size == vocab_size
        count = parameter_count(config.model)
        assert abs(count - BUDGET) <= TOLERANCE * BUDGET, run.name


def test_the_paper_preset_sizes_every_arm_to_two_million_and_asks_for_cuda():
    from experiments.params_budget import TOLERANCE, parameter_count
    from experiments.sweeps import load_sweep
    from experiments.training.config import build_config

    sweep = load_sweep("paper")
    assert sweep.needs_cuda and len(sweep.runs) == 12 * 5 * 2
    assert sweep.tuning.rates == (3e-4, 1e-3, 3e-3, 1e-2) and sweep.tuning.options["steps"] < 8000  # tuned rates
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
            {"train": {"model": "lstm", "task": "words", "seed": seed}, "task": {"word_group": "S5"},
             "model": {"vocab_size": 10, "hidden_size": 4}}))
        run.joinpath("final.json").write_text(json.dumps({"steps": 4, "test_accuracy@128": accuracy,
                                                          "parameters": 100, "test_split": "test"}))
        run.joinpath("metrics.jsonl").write_text(json.dumps({"step": 4, "valid_accuracy@64": accuracy}) + "\n")
    markdown = report(tmp_path)
    half = scipy.stats.t.ppf(0.975, 1) * math.sqrt(0.02) / math.sqrt(2)  # sample sd of (0.5, 0.7): √0.02
    assert "| arm | runs | test_accuracy@128 | parameters |" in markdown
    assert f"| words-S5 | 2 | 0.6000 ± {half:.4f} | 100.0000 ± 0.0000 |" in markdown
    assert (tmp_path / "report_valid_accuracy@64.png").stat().st_size > 0


TUNED_SWEEP = '''
from experiments.studies.charlm_v2.recipe import runs
from experiments.sweep_run import Tuning

TINY = {"steps": 4, "batch": 2, "length": 8, "lr": 1e-3, "eval_every": 2, "eval_tokens": 48, "checkpoint_every": 2,
        "carried_streams": 5000, "device": "auto"}
TUNING = Tuning(rates=(1e-3, 3e-2), options={"steps": 2})
RUNS = [run for run in runs("ptb_char", 50, budget=60_000, training=TINY, seeds=(1,))
        if run.name.startswith("rnn-O-seed")]
'''


def test_a_tuned_sweep_chooses_each_arms_rate_on_validation_then_trains_every_seed_at_it(tmp_path):
    """The charlm_v2 recipe in miniature (one arm, two rates, one seed): search, choice from the search runs'
    validation only, the run at the chosen rate, report, resumption."""
    sweep = tmp_path / "tuned.py"
    sweep.write_text(TUNED_SWEEP)
    out = tmp_path / "runs"
    status = run_sweep(sweep, out, workers=2)
    assert list(status) == ["rnn-O-seed1"]
    assert all(s["status"] == "done" for s in status.values()), status
    chosen = json.loads((out / "chosen_rates.json").read_text())
    for arm in ("rnn-O",):
        searched = {rate: json.loads((out / "tune" / f"{arm}-lr{rate:g}" / "final.json").read_text())
                    for rate in (1e-3, 3e-2)}
        assert all(final["steps"] == 2 for final in searched.values())
        best = min(searched, key=lambda rate: searched[rate]["valid_bits"])
        assert chosen[arm]["lr"] == best and chosen[arm]["score"] == searched[best]["valid_bits"]
        assert json.loads((out / "tune" / f"{arm}-lr{best:g}" / "config.json").read_text())["train"]["seed"] == 0
        for seed in (1,):  # the search ran seed 0
            config = json.loads((out / f"{arm}-seed{seed}" / "config.json").read_text())
            assert config["train"]["lr"] == best and config["train"]["seed"] == seed
            assert config["train"]["device"] == "cpu"  # "auto", resolved when the run started
            final = json.loads((out / f"{arm}-seed{seed}" / "final.json").read_text())
            assert final["best_step"] in (2, 4) and "test_carried_bits_per_token" in final
    markdown = report(out)
    assert "| rnn-O | 1 |" in markdown and "Learning-rate search" in markdown and "best step" in markdown
    assert (out / "report_dynamics_rnn-O.png").stat().st_size > 0
    again = run_sweep(sweep, out, workers=1)
    assert all(s["status"] == "skipped (complete)" for s in again.values())


def test_the_report_flags_a_best_step_at_the_last_evaluation():
    from experiments.report import NOT_CONVERGED, best_steps

    runs = [{"final": {"best_step": 300, "steps": 400}}, {"final": {"best_step": 400, "steps": 400}}]
    assert best_steps(runs) == f"300, 400{NOT_CONVERGED}"
    stopped = [{"final": {"best_step": 200, "steps": 250, "stopped": "training loss not finite at step 251"}},
               {"final": {"best_step": None, "steps": 37, "stopped": "training loss not finite at step 38"}}]
    assert best_steps(stopped) == "200 (NaN at step 251), — (NaN at step 38)"  # the second: no finite evaluation


@pytest.mark.parametrize("preset, dataset, folder, vocab_size", [("charlm-v2-ptb", "ptb_char", "ptb_char", 50),
                                                                 ("charlm-v2-shakespeare", "tinyshakespeare",
                                                                  "tinyshakespeare", 65)])
def test_the_v2_presets_tune_every_arm_and_train_equal_tokens(preset, dataset, folder, vocab_size, monkeypatch):
    from experiments.params_budget import TOLERANCE, parameter_count
    from experiments.studies.charlm_v2 import recipe as charlm_v2
    from experiments.sweep_run import LEARNING_RATES, arm_of
    from experiments.sweeps import load_sweep
    from experiments.training.config import build_config

    sweep = load_sweep(preset)
    assert sweep.tuning.rates == LEARNING_RATES == (3e-4, 1e-3, 3e-3, 1e-2) and sweep.tuning.seed == 0
    assert sweep.tuning.options["steps"] < charlm_v2.STEPS
    assert sweep.out == f"experiments/results/charlm_v2/{folder}"
    arms = {arm_of(run.name) for run in sweep.runs}
    assert arms == {"lstm", "gpt", "rnn-O", "rnn-O-mix-scalar", "rnn-U", "rnn-T", "rnn-BO", "rnn-GL", "transformer-O",
                    "rnn-O-naware", "rnn-O16-naware"}
    by_name = {run.name: run for run in sweep.runs}
    plain, fix = by_name["rnn-O-seed0"].options, by_name["rnn-O-naware-seed0"].options
    assert plain["map_lr"] == "plain" and fix["map_lr"] == "n_aware"  # the fix: the maps' n-aware rates
    assert {k: v for k, v in plain.items() if k != "map_lr"} == {k: v for k, v in fix.items() if k != "map_lr"}
    assert all("map_lr" not in run.options for run in sweep.runs
               if arm_of(run.name) not in ("rnn-O", "rnn-O-naware", "rnn-O16-naware"))
    second = by_name["rnn-O16-naware-seed0"].options  # the second O shape: n fixed, a wider embedding
    assert second["n"] == 16 and plain["n"] > 16 and second["embedding_dim"] > plain["embedding_dim"]
    assert second["map_lr"] == "n_aware"
    assert len(sweep.runs) == len(arms) * len(charlm_v2.SEEDS) and len(charlm_v2.SEEDS) >= 3
    tokens = {run.options["steps"] * run.options["batch"] * run.options["length"] for run in sweep.runs}
    assert len(tokens) == 1  # every arm trains on the same number of tokens
    for run in sweep.runs[::len(charlm_v2.SEEDS)]:
        assert run.options["device"] == "auto" and run.options["carried_streams"] > 0
        config = build_config(run.model, run.task, run.options)
        assert config.model.vocab_size == vocab_size
        assert abs(parameter_count(config.model) - charlm_v2.BUDGET) <= TOLERANCE * charlm_v2.BUDGET, run.name
        if run.model == "group_rnn":
            assert config.model.embedding_dim >= charlm_v2.MIN_EMBEDDING, run.name
    monkeypatch.setattr(charlm_v2, "O_FIX", {"reproject_every": 16})  # O_FIX may set any GroupRNNConfig field
    fixed = charlm_v2.templates(vocab_size)
    assert fixed["rnn-O-naware"][1].reproject_every == 16 and fixed["rnn-O-naware"][1].group == "O"


def test_the_rate_choice_reads_each_arms_search_runs_and_skips_unfinished_or_diverged_ones(tmp_path):
    from experiments.sweep_run import SweepRun, Tuning
    from experiments.tuning import choose_rates, tuning_runs, with_chosen_rates

    runs = [SweepRun(f"{arm}-seed{seed}", "lstm", "lm", {"dataset": "ptb_char", "lr": 1.0, "seed": seed})
            for arm in ("a", "b", "c") for seed in (0, 1, 2)]
    tuning = Tuning(rates=(1e-3, 1e-2, 1e-1), options={"steps": 7})
    search = tuning_runs(runs, tuning)
    assert [r.name for r in search[:3]] == ["a-lr0.001", "a-lr0.01", "a-lr0.1"] and len(search) == 9
    assert all(r.options["steps"] == 7 and r.options["seed"] == 0 for r in search)
    finals = {"a-lr0.001": 2.5, "a-lr0.01": 2.1, "a-lr0.1": 2.3, "b-lr0.001": 3.0, "b-lr0.1": float("nan")}
    for name, bits in finals.items():  # b-lr0.01 and every c run never finished; b-lr0.1 diverged
        (tmp_path / "tune" / name).mkdir(parents=True)
        (tmp_path / "tune" / name / "final.json").write_text(json.dumps({"valid_bits": bits, "best_step": 5}))
    chosen = choose_rates(runs, tuning, tmp_path / "tune")
    assert {arm: c["lr"] for arm, c in chosen.items()} == {"a": 1e-2, "b": 1e-3}
    assert chosen["b"]["scores"] == {"lr0.001": 3.0, "lr0.01": None, "lr0.1": None}
    assert json.loads((tmp_path / "chosen_rates.json").read_text()) == chosen
    tuned, untuned = with_chosen_rates(runs, chosen)
    assert [r.options["lr"] for r in tuned] == [1e-2] * 3 + [1e-3] * 3
    assert untuned == ["c-seed0", "c-seed1", "c-seed2"]


def test_the_rate_ladder_steps_half_a_decade_each_way():
    from experiments.tuning import next_rate

    assert [next_rate(rate, 1) for rate in (1e-3, 3e-3, 1e-2, 3e-2)] == [3e-3, 1e-2, 3e-2, 1e-1]
    assert [next_rate(rate, -1) for rate in (1e-3, 3e-4, 1e-2)] == [3e-4, 1e-4, 3e-3]


def test_a_grid_with_extended_edges_grows_past_the_edge_an_arms_best_rate_sits_on_until_it_is_inside(tmp_path):
    from experiments.sweep_run import SweepRun, Tuning
    from experiments.tuning import EDGE_STEPS, choose_rates, tuning_runs

    arms = ("up", "down", "inside", "pending", "cap")
    runs = [SweepRun(f"{arm}-seed0", "lstm", "lm", {"dataset": "ptb_char", "lr": 1.0, "seed": 0}) for arm in arms]
    tuning = Tuning(rates=(1e-3, 3e-3, 1e-2), extend_edges=True)
    bits = {"up": {1e-3: 3.0, 3e-3: 2.8, 1e-2: 2.5, 3e-2: 2.4, 1e-1: float("nan")},  # up once, then it diverges
            "down": {1e-3: 2.0, 3e-3: 2.2, 1e-2: 2.5, 3e-4: 2.1},  # down once: 1e-3 is inside
            "inside": {1e-3: 2.5, 3e-3: 2.0, 1e-2: 2.6},
            "pending": {3e-3: 2.6, 1e-2: 2.5},  # 1e-3 has not finished: the grid waits
            "cap": {rate: 3.0 - rate for rate in (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)}}  # better ever higher
    searched = set()
    while True:  # what the sweep does: train the search runs, then ask again
        names = {run.name for run in tuning_runs(runs, tuning, tmp_path)}
        if names <= searched:
            break
        for name in sorted(names - searched):
            arm, rate = name.rsplit("-lr", 1)
            if float(rate) in bits[arm]:
                (tmp_path / name).mkdir()
                (tmp_path / name / "final.json").write_text(json.dumps({"valid_bits": bits[arm][float(rate)]}))
        searched |= names
    chosen = choose_rates(runs, tuning, tmp_path)
    assert {arm: chosen[arm]["rates"] for arm in arms} == {
        "up": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1], "down": [3e-4, 1e-3, 3e-3, 1e-2], "inside": [1e-3, 3e-3, 1e-2],
        "pending": [1e-3, 3e-3, 1e-2], "cap": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]}
    assert len(chosen["cap"]["rates"]) == 3 + EDGE_STEPS
    assert {arm: chosen[arm]["lr"] for arm in arms} == {"up": 3e-2, "down": 1e-3, "inside": 3e-3, "pending": 1e-2,
                                                       "cap": 3e-1}
    assert chosen["up"]["scores"]["lr0.1"] is None  # the diverged edge stays in the record
    plain = choose_rates(runs, Tuning(rates=(1e-3, 3e-3, 1e-2)), tmp_path)  # without extension: the grid alone
    assert plain["up"]["lr"] == 1e-2 and plain["up"]["rates"] == [1e-3, 3e-3, 1e-2]
    assert "| up | 3.0000 | 2.8000 | **2.4000** |" not in report_rates(chosen)
    assert "| down | 2.1000 | **2.0000** | 2.2000 | 2.5000 | — | — | — | 0.001 |" in report_rates(chosen)


def report_rates(chosen):
    from experiments.report import rates_table

    return rates_table({arm: {**choice, "stable": True, "diverged_rates": []} for arm, choice in chosen.items()})


def test_the_stability_check_moves_an_arm_whose_search_now_chooses_another_rate_aside_and_trains_that_rate(tmp_path):
    from experiments.sweep_run import SweepRun, Tuning
    from experiments.tuning import settle_rates

    runs = [SweepRun(f"a-seed{seed}", "lstm", "lm", {"dataset": "ptb_char", "lr": 1.0, "seed": seed}) for seed in (0, 1)]
    tuning = Tuning(rates=(1e-3, 1e-2), stability_margin=0.25, extend_edges=True)
    falling = [4.0, 3.0, 2.8]
    _fake_run(tmp_path / "a-seed0", 1e-2, falling)  # stable at the grid's top, and seed 1 trained there
    _fake_run(tmp_path / "a-seed1", 1e-2, falling)
    chosen = {"a": {"lr": 3e-2, "rates": [1e-3, 1e-2, 3e-2], "scores": {"lr0.001": 3.0, "lr0.01": 2.8, "lr0.03": 2.7}}}
    pending = settle_rates(runs, tuning, chosen, tmp_path)  # the search went past the edge, and 3e-2 scored better
    assert [(r.name, r.options["lr"]) for r in pending] == [("a-seed0", 3e-2)]
    assert sorted(p.name for p in (tmp_path / "superseded" / "lr0.01").iterdir()) == ["a-seed0", "a-seed1"]
    assert not (tmp_path / "a-seed0").exists() and not (tmp_path / "diverged").exists()
    _fake_run(tmp_path / "a-seed0", 3e-2, falling)
    assert settle_rates(runs, tuning, chosen, tmp_path) == []
    assert (chosen["a"]["lr"], chosen["a"]["stable"], chosen["a"]["diverged_rates"]) == (3e-2, True, [])


@pytest.mark.parametrize("seed, search", [(1, '{"steps": 2}'), (0, "{}")])
def test_a_sweep_grown_past_its_edges_moves_the_runs_of_its_old_choice_aside_and_trains_at_the_new_one(
        seed, search, tmp_path, monkeypatch):
    """TUNED_SWEEP on its grid (1e-3, 3e-2), then again with extend_edges, on a pool whose runs score
    2 + |log10(lr / 0.1)| bits: the search grows to 1e-1 and 3e-1 and chooses 1e-1, and the run trained at
    3e-2 moves to superseded/. Where the search runs are the sweep's own (seed 0 at the full length), the
    new choice's search run is copied, not trained again."""
    from experiments import sweep as sweep_module

    trained = []

    def scripted_pool(pending, out, workers, threads):
        trained.extend(run.name for run in pending)
        for run in pending:
            _fake_run(out / run.name, run.options["lr"], [4.0, 2.0 + abs(math.log10(run.options["lr"] / 0.1))])
        return [{"name": run.name, "status": "done"} for run in pending]

    monkeypatch.setattr(sweep_module, "_run_on_pool", scripted_pool)
    sweep, out = tmp_path / "edges.py", tmp_path / "runs"
    on_grid = TUNED_SWEEP.replace('options={"steps": 2})', f'options={search}, stability_margin=0.25)')
    sweep.write_text(on_grid.replace("seeds=(1,)", f"seeds=({seed},)").replace("rnn-O-seed1", f"rnn-O-seed{seed}"))
    run_sweep(sweep, out)
    assert json.loads((out / f"rnn-O-seed{seed}" / "config.json").read_text())["train"]["lr"] == 3e-2
    sweep.write_text(sweep.read_text().replace("stability_margin=0.25)", "stability_margin=0.25, extend_edges=True)"))
    trained.clear()
    status = run_sweep(sweep, out)[f"rnn-O-seed{seed}"]["status"]
    assert trained == ["rnn-O-lr0.1", "rnn-O-lr0.3"] + ([f"rnn-O-seed{seed}"] if seed else [])
    assert status == ("done" if seed else "skipped (complete)")
    chosen = json.loads((out / "chosen_rates.json").read_text())["rnn-O"]
    assert (chosen["rates"], chosen["lr"], chosen["stable"]) == ([1e-3, 3e-2, 1e-1, 3e-1], 1e-1, True)
    assert sorted(p.name for p in (out / "tune").iterdir() if p.is_dir()) == [
        "rnn-O-lr0.001", "rnn-O-lr0.03", "rnn-O-lr0.1", "rnn-O-lr0.3"]
    assert json.loads((out / f"rnn-O-seed{seed}" / "config.json").read_text())["train"]["lr"] == 1e-1
    moved = out / "superseded" / "lr0.03" / f"rnn-O-seed{seed}"
    assert json.loads((moved / "config.json").read_text())["train"]["lr"] == 3e-2


def test_a_full_budget_search_run_is_reused_as_its_seeds_run_and_equals_training_it_again(tmp_path):
    from experiments.sweep_run import SweepRun, Tuning
    from experiments.training.loop import run as train_run
    from experiments.training.config import build_config
    from experiments.tuning import choose_rates, reuse_search_runs, tuning_runs, with_chosen_rates

    options = {"steps": 4, "batch": 2, "eval_every": 2, "checkpoint_every": 2, "delay": 3, "eval_sequences": 2,
               "hidden_size": 4, "warmup": 0}
    runs = [SweepRun(f"a-seed{seed}", "lstm", "copy", {**options, "lr": 1.0, "seed": seed}) for seed in (0, 1)]
    tuning = Tuning(rates=(1e-3, 1e-2))  # the full budget: the seed-0 search run is a run of the sweep
    for search in tuning_runs(runs, tuning):
        train_run(build_config(search.model, search.task, search.options), tmp_path / "tune" / search.name)
    tuned, _ = with_chosen_rates(runs, choose_rates(runs, tuning, tmp_path / "tune"))
    assert reuse_search_runs(tuned, tuning, tmp_path / "tune", tmp_path) == ["a-seed0"]
    rate = tuned[0].options["lr"]
    source = tmp_path / "tune" / f"a-lr{rate:g}"
    assert (tmp_path / "a-seed0" / "final.json").read_text() == (source / "final.json").read_text()
    assert str(tmp_path / "a-seed0") in (tmp_path / "a-seed0" / "command.txt").read_text()
    assert str(source) not in (tmp_path / "a-seed0" / "command.txt").read_text()
    again = train_run(build_config("lstm", "copy", tuned[0].options), tmp_path / "again")  # what reuse replaces
    timing = ("tokens_per_second", "train_seconds")
    reused = json.loads((tmp_path / "a-seed0" / "final.json").read_text())
    assert {k: v for k, v in again.items() if k not in timing} == {k: v for k, v in reused.items() if k not in timing}
    assert reuse_search_runs(tuned, tuning, tmp_path / "tune", tmp_path) == []  # already there: not copied again
    shorter = Tuning(rates=(1e-3, 1e-2), options={"steps": 2})  # a shorter search is never a run of the sweep
    assert reuse_search_runs(tuned, shorter, tmp_path / "tune", tmp_path / "other") == []


def test_a_run_that_finishes_after_a_failed_attempt_drops_the_stale_error(tmp_path):
    from experiments.sweep import execute
    from experiments.sweep_run import SweepRun

    run = SweepRun("a-seed0", "lstm", "copy", {"steps": 2, "batch": 2, "eval_every": 2, "checkpoint_every": 2,
                                               "delay": 3, "eval_sequences": 2, "hidden_size": 4, "warmup": 0})
    (tmp_path / run.name).mkdir()
    (tmp_path / run.name / "error.txt").write_text("Traceback: an earlier attempt\n")
    assert execute(run, tmp_path / run.name)["status"] == "done"
    assert (tmp_path / run.name / "final.json").exists() and not (tmp_path / run.name / "error.txt").exists()


def test_a_run_finished_after_the_sweep_listed_it_is_not_entered_again(tmp_path):
    from experiments.sweep import execute
    from experiments.sweep_run import SweepRun

    directory = tmp_path / "so3-seed0"
    directory.mkdir()
    (directory / "final.json").write_text('{"steps": 3}')
    run = SweepRun("so3-seed0", "group_rnn", "lm", {"dataset": "ptb_char", "group": "SO", "n": 3, "steps": 3})
    assert execute(run, directory) == {"name": "so3-seed0", "status": "done"}
    assert sorted(p.name for p in directory.iterdir()) == ["final.json"]  # nothing trained, nothing written


def _fake_run(directory, lr, valid, stopped=False):
    """A finished run at ``lr`` whose evaluations scored ``valid`` (bits); final.json holds the best."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"train": {"lr": lr}}))
    (directory / "command.txt").write_text(f"python -m experiments.train --lr {lr} --run-dir {directory}\n")
    (directory / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "valid_bits": v}) + "\n"
                                                     for i, v in enumerate(valid)))
    finite = [v for v in valid if math.isfinite(v)]
    final = {"valid_bits": min(finite) if finite else float("nan"), **({"stopped": "nan"} if stopped else {})}
    (directory / "final.json").write_text(json.dumps(final))


def test_a_diverged_run_is_one_whose_last_validation_ends_far_above_its_best_or_whose_loss_broke(tmp_path):
    from experiments.tuning import diverged

    cases = {"falls": ([4.0, 3.0, 2.9], False), "wobbles": ([4.0, 3.0, 3.2], False), "rises": ([4.0, 3.0, 3.3], True),
             "nan": ([4.0, 3.0, float("nan")], True), "never finite": ([float("nan")], True)}
    for name, (valid, verdict) in cases.items():
        _fake_run(tmp_path / name, 1e-3, valid)
        assert diverged(tmp_path / name, "valid_bits", 0.25) is verdict, name
    _fake_run(tmp_path / "stopped", 1e-3, [4.0, 3.0], stopped=True)
    assert diverged(tmp_path / "stopped", "valid_bits", 0.25)


def test_the_stability_check_moves_a_diverged_arm_to_its_next_rate_and_keeps_the_best_when_none_is_stable(tmp_path):
    from experiments.sweep_run import SweepRun, Tuning
    from experiments.tuning import settle_rates

    runs = [SweepRun(f"{arm}-seed{seed}", "lstm", "lm", {"dataset": "ptb_char", "lr": 1.0, "seed": seed})
            for arm in ("a", "b", "c") for seed in (0, 1)]
    tuning = Tuning(rates=(1e-3, 1e-2, 1e-1), stability_margin=0.25)
    scores = {"a": (2.5, 2.1, 2.3), "b": (3.0, None, None), "c": (2.2, 2.0, None)}
    chosen = {arm: {"lr": 1e-3 if arm == "b" else 1e-2, "rates": [1e-3, 1e-2, 1e-1],
                    "scores": dict(zip(("lr0.001", "lr0.01", "lr0.1"), rates))}
              for arm, rates in scores.items()}  # the search's choices
    rising, falling = [4.0, 3.0, 3.5], [4.0, 3.0, 2.8]
    _fake_run(tmp_path / "a-seed0", 1e-2, rising)  # a: diverges at its search choice, a seed-1 run there too
    _fake_run(tmp_path / "a-seed1", 1e-2, falling)
    _fake_run(tmp_path / "b-seed0", 1e-3, rising)  # b: its only finite rate diverges
    _fake_run(tmp_path / "c-seed0", 1e-2, [4.0, 2.9, 3.6])  # c: best 2.9 at 1e-2, then 3.0 at 1e-3
    pending = settle_rates(runs, tuning, chosen, tmp_path)
    assert [(r.name, r.options["lr"], r.options["seed"]) for r in pending] == [("a-seed0", 1e-1, 0), ("c-seed0", 1e-3, 0)]
    assert sorted(p.name for p in (tmp_path / "diverged" / "lr0.01").iterdir()) == ["a-seed0", "a-seed1", "c-seed0"]
    assert (chosen["a"]["lr"], chosen["a"]["search_lr"], chosen["a"]["stable"]) == (1e-1, 1e-2, None)
    assert (chosen["b"]["lr"], chosen["b"]["stable"], chosen["b"]["diverged_rates"]) == (1e-3, False, [])
    assert (tmp_path / "b-seed0" / "final.json").exists()  # nothing better to move to: it stays
    parked = tmp_path / "diverged" / "lr0.01" / "a-seed1"
    assert (parked / "command.txt").read_text().endswith(f"--run-dir {parked}\n")  # the command follows the run

    _fake_run(tmp_path / "a-seed0", 1e-1, falling)  # what the sweep trains next
    _fake_run(tmp_path / "c-seed0", 1e-3, [4.0, 3.0, float("nan")])
    assert settle_rates(runs, tuning, chosen, tmp_path) == []
    assert (chosen["a"]["lr"], chosen["a"]["stable"], chosen["a"]["diverged_rates"]) == (1e-1, True, [1e-2])
    assert (chosen["c"]["lr"], chosen["c"]["stable"], chosen["c"]["diverged_rates"]) == (1e-2, False, [1e-3])
    assert json.loads((tmp_path / "c-seed0" / "config.json").read_text())["train"]["lr"] == 1e-2  # back in place
    assert json.loads((tmp_path / "chosen_rates.json").read_text()) == chosen
    assert settle_rates(runs, tuning, chosen, tmp_path) == []  # settled: a second look moves nothing
    assert (chosen["c"]["lr"], chosen["c"]["stable"]) == (1e-2, False) and (tmp_path / "c-seed0").exists()


def test_a_sweep_with_a_stability_margin_trains_a_diverged_arms_first_run_again_at_its_next_rate(tmp_path, monkeypatch):
    """TUNED_SWEEP with a margin, where the search's choice is declared diverged: the sweep parks that run and
    trains every run at the other rate."""
    from experiments import tuning as tuning_module

    sweep = tmp_path / "stable.py"
    sweep.write_text(TUNED_SWEEP.replace('options={"steps": 2})', 'options={"steps": 2}, stability_margin=0.25)'))
    out = tmp_path / "runs"
    first_choice = []

    def the_search_choice_diverges(directory, key, margin):
        rate = json.loads((directory / "config.json").read_text())["train"]["lr"]
        first_choice.append(rate)
        return rate == first_choice[0]

    monkeypatch.setattr(tuning_module, "diverged", the_search_choice_diverges)
    status = run_sweep(sweep, out, workers=2)
    assert all(s["status"] == "done" for s in status.values()), status
    chosen = json.loads((out / "chosen_rates.json").read_text())["rnn-O"]
    other = ({1e-3, 3e-2} - {first_choice[0]}).pop()
    assert chosen["search_lr"] == first_choice[0] and chosen["lr"] == other and chosen["stable"] is True
    assert json.loads((out / "diverged" / f"lr{first_choice[0]:g}" / "rnn-O-seed1" / "config.json").read_text()
                      )["train"]["lr"] == first_choice[0]
    assert json.loads((out / "rnn-O-seed1" / "config.json").read_text())["train"]["lr"] == other
    markdown = report(out)
    assert f"| {other:g} | diverged at {first_choice[0]:g}; stable at {other:g} |" in markdown
    assert "| rnn-O | 1 |" in markdown  # the parked run is not one of the arm's runs
    assert (out / "report_stability.png").stat().st_size > 0  # both rates' curves


from experiments.report import plot_seeds, seed_mean


def test_the_seed_mean_ends_where_the_shortest_run_ends_and_the_longer_runs_are_drawn_on_alone():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def run(values):
        return {"metrics": [{"step": 100 * (i + 1), "valid_bits": v} for i, v in enumerate(values)]}

    stopped, full = run([4.0, 3.0]), run([3.0, 2.0, 1.5, 1.0])
    assert seed_mean([stopped, full], "valid_bits") == ([100, 200], [3.5, 2.5])
    assert seed_mean([], "valid_bits") == ([], [])
    figure, axis = plt.subplots()
    plot_seeds(axis, [stopped, full], "valid_bits", label="arm")
    (mean, tail) = axis.lines
    assert list(mean.get_xdata()) == [100, 200] and list(mean.get_ydata()) == [3.5, 2.5]
    assert list(tail.get_xdata()) == [200, 300, 400] and list(tail.get_ydata()) == [2.0, 1.5, 1.0]
    assert tail.get_color() == mean.get_color() and mean.get_label() == "arm" and tail.get_label().startswith("_")
    figure, axis = plt.subplots()
    plot_seeds(axis, [run([1.0, 0.0, 2.0])], "valid_bits", log=True)
    assert list(axis.lines[0].get_ydata()) == [1.0, 2.0]
    plt.close("all")


def test_a_v2_group_rnn_the_sizer_leaves_a_narrow_embedding_takes_the_next_smaller_n():
    from experiments import lm_arms
    from experiments.params_budget import TOLERANCE, parameter_count
    from experiments.studies.charlm_v2 import recipe as charlm_v2

    first = lm_arms.arms(50, charlm_v2.BUDGET, study=charlm_v2.templates, free=charlm_v2.FREE)["rnn-U"][1]
    assert (first.n, first.embedding_dim) == (17, 9)  # the sizer's closer n on Penn Treebank characters
    model, config = charlm_v2.arms(50)["rnn-U"]
    assert model == "group_rnn" and config.n == 16 and config.embedding_dim >= charlm_v2.MIN_EMBEDDING
    assert abs(parameter_count(config) - charlm_v2.BUDGET) <= TOLERANCE * charlm_v2.BUDGET
    unchanged = lm_arms.arms(50, charlm_v2.BUDGET, study=charlm_v2.templates, free=charlm_v2.FREE)
    assert {arm: sized for arm, sized in charlm_v2.arms(50).items() if arm != "rnn-U"} == \
        {arm: sized for arm, sized in unchanged.items() if arm != "rnn-U"}


def _tiny_lstm_run(directory, seed=0, steps=4):
    from experiments import train

    assert train.main(["--model", "lstm", "--dataset", "ptb_char", "--hidden-size", "4", "--steps", str(steps),
                       "--batch", "2", "--length", "8", "--eval-every", "2", "--checkpoint-every", "2",
                       "--eval-tokens", "50", "--seed", str(seed), "--run-dir", str(directory)]) == 0
    return directory


def test_the_report_takes_one_run_directory(tmp_path):
    run = _tiny_lstm_run(tmp_path / "lstm-seed0")
    markdown = report(run)
    assert markdown.startswith("# Report: lstm-seed0") and "| lstm | 1 |" in markdown
    assert (run / "report.md").read_text() == markdown


def test_a_run_with_the_seed_and_configuration_of_another_is_a_duplicate_not_a_second_seed(tmp_path):
    import shutil

    sweep = tmp_path / "sweep"
    _tiny_lstm_run(sweep / "lstm-seed0")
    shutil.copytree(sweep / "lstm-seed0", sweep / "lstm-seed0-copy")
    markdown = report(sweep)
    assert "| lstm | 1 |" in markdown
    assert "Left out as duplicates (the configuration and seed of a run above): lstm-seed0-copy (seed 0 of lstm-seed0)" \
        in markdown
    _tiny_lstm_run(sweep / "lstm-seed1", seed=1)
    assert "| lstm | 2 |" in report(sweep)


def test_a_run_recorded_before_a_field_existed_is_a_seed_of_the_arm_that_records_it_at_its_default(tmp_path):
    """A config.json without a field (and without world_size) trained at the field's default: its run
    is another seed of the same arm, not an arm of its own; a field off its default still splits."""
    sweep = tmp_path / "sweep"
    _tiny_lstm_run(sweep / "lstm-seed0")
    _tiny_lstm_run(sweep / "lstm-seed1", seed=1)
    recorded = json.loads((sweep / "lstm-seed1" / "config.json").read_text())
    del recorded["train"]["precision"], recorded["train"]["checkpoint_activations"], recorded["world_size"]
    (sweep / "lstm-seed1" / "config.json").write_text(json.dumps(recorded))
    assert "| lstm | 2 |" in report(sweep)
    recorded["train"]["precision"] = "bf16"
    (sweep / "lstm-seed1" / "config.json").write_text(json.dumps(recorded))
    assert "| lstm | 1 |" in report(sweep)


def test_a_resumed_runs_train_time_sums_its_parts_and_the_report_says_it_was_resumed(tmp_path):
    """The checkpoint carries the seconds trained so far; the resumed part adds its own to them."""
    import torch

    from experiments import train

    run = _tiny_lstm_run(tmp_path / "sweep" / "lstm-seed0")
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    assert 0 < checkpoint["train_seconds"] <= json.loads((run / "final.json").read_text())["train_seconds"]
    checkpoint["train_seconds"] = 1000.0  # as if the first part had taken 1000 s
    torch.save(checkpoint, run / "checkpoint.pt")
    assert train.main(["--resume", str(run), "--steps", "6"]) == 0
    assert json.loads((run / "final.json").read_text())["train_seconds"] > 1000.0
    assert "| lstm | 1 (1 resumed) |" in report(tmp_path / "sweep")


def test_threads_per_run_default_to_the_cores_shared_out_and_take_the_given_count(tmp_path, monkeypatch):
    """``--threads`` reaches the pool that starts the runs; without it each run gets cores // workers."""
    import experiments.sweep

    sweep = tmp_path / "few.py"
    sweep.write_text(SWEEP)
    seen = []

    def pool(pending, out, workers, threads):
        seen.append((workers, threads))
        return [{"name": run.name, "status": "done"} for run in pending]

    monkeypatch.setattr(experiments.sweep, "_run_on_pool", pool)
    monkeypatch.setattr(experiments.sweep.os, "cpu_count", lambda: 8)
    run_sweep(sweep, tmp_path / "a", workers=2)
    run_sweep(sweep, tmp_path / "b", workers=2, threads=1)
    assert seen == [(2, 4), (2, 1)]
    with pytest.raises(SystemExit):
        experiments.sweep.main([str(sweep), "--out", str(tmp_path / "c"), "--threads", "0"])


DATA_PARALLEL_SWEEP = '''
from experiments.sweep_run import SweepRun

SMALL = {"dataset": "tinyshakespeare", "group": "O", "n": 8, "steps": 10, "batch": 8, "length": 32, "eval_every": 10,
         "eval_tokens": 512}
RUNS = [SweepRun("two-processes", "group_rnn", "lm", SMALL, processes=2),
        SweepRun("odd-batch", "group_rnn", "lm", {**SMALL, "batch": 3}, processes=2)]
'''


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_sweep_run_of_two_processes_trains_under_torchrun_what_one_process_trains(tmp_path, executor):
    """A SweepRun with processes=2 on the pool and on a local Ray: two gloo ranks, world_size 2 in
    config.json, the single-process bits within 1e-4; a batch the ranks cannot share is refused."""
    from experiments.training import loop
    from experiments.training.config import build_config

    sweep = tmp_path / "dp.py"
    sweep.write_text(DATA_PARALLEL_SWEEP)
    status = run_sweep(sweep, tmp_path / "runs", workers=2, executor=executor, threads=1)
    assert status["two-processes"]["status"] == "done", status
    assert status["odd-batch"]["status"] == "failed" and "does not split" in status["odd-batch"]["error"]
    directory = tmp_path / "runs" / "two-processes"
    assert json.loads((directory / "config.json").read_text())["world_size"] == 2
    two = json.loads((directory / "final.json").read_text())
    single = loop.run(build_config("group_rnn", "lm", {"dataset": "tinyshakespeare", "group": "O", "n": 8, "steps": 10,
                                                       "batch": 8, "length": 32, "eval_every": 10, "eval_tokens": 512}),
                      tmp_path / "one")
    for key in ("valid_bits", "test_bits_per_token"):
        assert two[key] == pytest.approx(single[key], rel=1e-4), key
