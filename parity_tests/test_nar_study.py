"""The noisy-recall presets (nar-cpu, nar-paper): their runs, a few-step smoke run of each one's code
path, the CUDA guard, and the recall report's statistics on a small known input."""

import dataclasses
import json
import math

import pytest
import scipy.stats

from experiments.report import finished_runs, report, task_of
from experiments.sweep import execute, run_sweep
from experiments.sweep_run import SweepRun
from experiments.sweeps import load_runs, load_sweep
from experiments.training.config import build_config


def _smoke(run, **overrides):
    options = {**run.options, "steps": 2, "batch": 2, "valid_sequences": 2, "eval_every": 1, **overrides}
    return dataclasses.replace(run, options=options)


def test_nar_cpu_preset_has_four_arms_of_eight_paired_seeds():
    runs = load_runs("nar-cpu")
    arms = {(r.options["read"], r.options["schedule"]) for r in runs}
    assert arms == {("plain", "cosine"), ("ns", "cosine"), ("plain", "constant"), ("ns", "constant")}
    for arm in arms:
        seeds = [r.options["seed"] for r in runs if (r.options["read"], r.options["schedule"]) == arm]
        assert seeds == list(range(8))
    assert all(r.task == "recall" and r.model == "mlstm" for r in runs)


def test_nar_paper_preset_is_the_spec_protocol():
    runs = load_runs("nar-paper")
    assert len(runs) == 5 * 4 * 24 * 2 * 2
    assert {(r.options["vocab_size"], r.options["length"]) for r in runs} == {
        (80, 512), (80, 768), (80, 1024), (96, 768), (96, 1024)}
    assert {r.options["lr"] for r in runs} == {3e-4, 1e-3, 3e-3, 1e-2}
    assert all(r.options["steps"] == 2000 and r.options["batch"] == 64 for r in runs)
    # the post's cosine decay and docs/design.md's (Tasks and data) constant-rate control, each on every cell and seed
    cells = {}
    for r in runs:
        cell = (r.options["vocab_size"], r.options["length"], r.options["lr"], r.options["read"], r.options["seed"])
        cells.setdefault(cell, []).append(r.options["schedule"])
    assert len(cells) == 5 * 4 * 2 * 24
    assert all(sorted(schedules) == ["constant", "cosine"] for schedules in cells.values())


@pytest.mark.parametrize("preset,index,overrides", [
    ("nar-cpu", 0, {}), ("nar-cpu", -1, {}),  # plain, cosine / ns, constant
    ("nar-paper", 0, {}), ("nar-paper", -1, {"length": 32})],  # ns at L=1024 would take minutes on CPU
    ids=["cpu-plain", "cpu-ns", "paper-plain", "paper-ns"])
def test_a_few_steps_of_each_preset_code_path(tmp_path, preset, index, overrides):
    run = _smoke(load_runs(preset)[index], **overrides)
    assert execute(run, tmp_path / run.name)["status"] == "done", (tmp_path / run.name / "error.txt").read_text()
    final = json.loads((tmp_path / run.name / "final.json").read_text())
    assert 0.0 <= final["valid_accuracy"] <= 1.0 and final["steps"] == 2


def test_a_sweep_that_needs_cuda_stops_before_starting_on_cpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    sweep = tmp_path / "gpu.py"
    sweep.write_text("from experiments.sweep_run import SweepRun\nNEEDS_CUDA = 'Too slow here.'\nRUNS = []\n")
    with pytest.raises(RuntimeError, match="Too slow here.*--allow-cpu"):
        run_sweep(sweep, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert run_sweep(sweep, tmp_path / "out", allow_cpu=True) == {}


def test_recall_runs_are_validated():
    with pytest.raises(ValueError, match="unknown task"):
        build_config("mlstm", "eval", {})
    with pytest.raises(ValueError, match="mlstm"):
        build_config("mlstm-x", "recall", {})
    with pytest.raises(TypeError, match="option 'lr'"):
        SweepRun("x", "mlstm", "recall", {"lr": [1e-3]})
    with pytest.raises(FileNotFoundError, match="presets"):
        load_sweep("nar-gpu")


def _write_run(directory, read, schedule, seed, curve):
    """A finished V48-L64, lr 0.01 recall run; its config.json (where the report reads its cell) says
    ``read`` (``ns<k>``: the NS read with k steps), ``schedule`` and ``seed``."""
    model = {"read": "ns", "ns_steps": int(read[2:])} if read.startswith("ns") and read != "ns" else {"read": read}
    config = build_config("mlstm", "recall", {"vocab_size": 48, "length": 64, "lr": 0.01, "schedule": schedule,
                                              "seed": seed, **model})
    run = directory / f"V48-L64-lr0.01-{read}-{schedule}-seed{seed}"
    run.mkdir(parents=True)
    run.joinpath("config.json").write_text(json.dumps(config.to_json()))
    run.joinpath("metrics.jsonl").write_text(
        "".join(json.dumps({"step": step, "valid_accuracy": accuracy}) + "\n" for step, accuracy in curve))
    run.joinpath("final.json").write_text(json.dumps({"valid_accuracy": curve[-1][1]}))


def test_recall_report_statistics_on_known_finals(tmp_path):
    finals = {("plain", "cosine"): [0.1, 0.9, 0.2], ("ns", "cosine"): [0.3, 0.95, 0.85],
              ("plain", "constant"): [0.5, 0.5, 0.9]}
    for (read, schedule), values in finals.items():
        for seed, value in enumerate(values):
            _write_run(tmp_path, read, schedule, seed, [(10, 0.0), (20, value)])
    assert task_of(finished_runs(tmp_path)) == "recall"
    markdown = report(tmp_path)
    t = scipy.stats.t.ppf(0.975, 2)
    # plain, cosine: mean 0.4, sample sd sqrt(((−0.3)² + 0.5² + (−0.2)²)/2) = sqrt(0.19)
    assert f"| V48-L64 | 0.01 | plain | cosine | 3 | 0.400 ± {t * math.sqrt(0.19 / 3):.3f} | 1/3 | 0.10 0.90 0.20 |" \
        in markdown
    assert "| ns | cosine | 3 |" in markdown and "| 2/3 |" in markdown
    paired = {r["comparison"]: r for r in json.loads((tmp_path / "report.json").read_text())["paired"]}
    # ns − plain (cosine), by seed: 0.2, 0.05, 0.65 -> mean 0.3
    assert paired["ns − plain (cosine)"]["mean"] == pytest.approx(0.3)
    assert paired["ns − plain (cosine)"]["half_width"] == pytest.approx(t * 0.3122498999 / math.sqrt(3), rel=1e-6)
    # cosine − constant (plain): −0.4, 0.4, −0.7 -> mean −0.2333
    assert paired["cosine − constant (plain)"]["mean"] == pytest.approx(-0.7 / 3)
    assert "cosine − constant (ns)" not in paired  # no constant-schedule NS runs to pair with
    assert (tmp_path / "report_curves.png").stat().st_size > 0


def test_ns_step_arms_are_labelled_and_paired_with_plain(tmp_path):
    runs = load_runs("nar-cpu-ns-steps")
    assert {r.name.split("-")[3] for r in runs} == {"ns1", "ns3"}
    assert {r.options["ns_steps"] for r in runs} == {1, 3}
    assert all("ns_steps" not in r.options for r in load_runs("nar-cpu"))  # 5 steps: the default
    for read, value in (("plain", 0.2), ("ns1", 0.5)):
        for seed in range(2):
            _write_run(tmp_path, read, "cosine", seed, [(10, value + 0.1 * seed)])
    report(tmp_path)
    paired = {r["comparison"]: r for r in json.loads((tmp_path / "report.json").read_text())["paired"]}
    assert paired["ns1 − plain (cosine)"]["mean"] == pytest.approx(0.3)
