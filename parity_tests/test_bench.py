"""The benchmark suite runs end to end (no timing is asserted: ratios are for the report)."""

import dataclasses
import json

import pytest
import torch

from experiments.bench.__main__ import main
from experiments.bench.timing import alternate, row
from experiments.provenance import git_revision
from experiments.training import cuda_graphs
from parity_tests.test_captured_step import Graphs, capturable_anywhere  # noqa: F401 (a fixture)
from reference.config import GROUP_NAMES, GroupRNNConfig


def test_alternate_times_every_contender_and_row_checks_the_target():
    calls = []
    times = alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4 and set(times) == {"a", "b"}
    assert row("x", 2.0, ">=", 1.5)["met"] and not row("x", 2.0, "<=", 1.5)["met"]


def test_an_information_row_has_no_target_and_half_a_target_is_refused():
    info = row("x", 2.0)
    assert info["met"] is None and info["target"] is None and info["op"] is None
    with pytest.raises(ValueError, match="both op and target"):
        row("x", 2.0, ">=")


def test_one_suite_per_thread_count(tmp_path):
    threads = torch.get_num_threads()
    assert main(["--quick", "--only", "exp", "--threads", "1", "2", "--out", str(tmp_path)]) == 0
    assert torch.get_num_threads() == threads
    for count in (1, 2):
        record = json.loads((tmp_path / f"bench_quick_threads{count}.json").read_text())
        assert record["machine"]["threads"] == count and record["revision"] == git_revision()
        assert record["rows"] and all(r["met"] is None and r["ratio"] > 0 for r in record["rows"])


def test_a_cuda_run_without_a_gpu_stops_with_a_clear_error(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the refusal path cannot be exercised")
    with pytest.raises(SystemExit) as stop:
        main(["--quick", "--device", "cuda", "--out", str(tmp_path)])
    assert stop.value.code == 2 and "no CUDA device" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_quick_suite_writes_every_row(tmp_path):
    """Every row of the speed table (experiments/studies/bench/README.md) at small shapes: the group RNN against its matched LSTM (O(24),
    U(24), the demo's O(16), T and BO sized to a budget), the Transformer, the NS read's step and
    memory, and the information rows (exponential, reference)."""
    assert main(["--quick", "--threads", "1", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "bench_quick_threads1.json").read_text())
    assert {"cpus", "torch", "threads"} <= set(record["machine"])
    assert all({"name", "ratio", "target", "met"} <= set(r) for r in record["rows"])
    names = [r["name"] for r in record["rows"]]
    for part in ("O(24)", "U(24)", "demo O(16)", "T sized to", "BO 2×2 blocks sized to", "Transformer",
                 "NS read step", "NS read peak memory"):
        assert sum(part in name for name in names) == 1, part
    information = [r["name"] for r in record["rows"] if r["met"] is None]
    assert len(information) == 3 and all("matrix_exp" in n or "reference" in n for n in information)
    assert len(record["rows"]) == 11


def test_quick_scaling_curves_write_json_and_png(tmp_path):
    from experiments.bench import scaling

    assert scaling.main(["--quick", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "scaling_quick.json").read_text())
    assert set(record["curves"]) == {"length", "n"}
    for axis in ("length", "n"):
        for group in scaling.GROUPS:
            assert all(point["tokens_per_s"] > 0 for point in record["curves"][axis][group])
    assert (tmp_path / "scaling_quick.png").stat().st_size > 0


@pytest.mark.parametrize("recurrent", [True, False])
def test_the_rebuilding_mode_holds_the_drive_and_one_state_in_every_k_for_the_backward(recurrent):
    """``held`` of keep_state_every = k is the closed form T·B·dim g (the drive c_t) plus (T/k + 1)·B·n²
    (the kept states) float32 numbers; keeping every state holds at least the T·B·n² of the states."""
    from experiments.bench import memory

    threads, length = torch.get_num_threads(), 128
    batch, n, k = memory.BATCH, memory.CONFIG.n, memory.KEEP_STATE_EVERY
    try:
        rebuilt = memory.measure(dataclasses.replace(memory.CONFIG, recurrent=recurrent, keep_state_every=k), length)
        every = memory.measure(dataclasses.replace(memory.CONFIG, recurrent=recurrent), length)
    finally:
        torch.set_num_threads(threads)
    assert rebuilt["held"] == 4 * (length * batch * n * (n - 1) // 2 + (length // k + 1) * batch * n * n)
    assert every["held"] >= 4 * length * batch * n * n


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's compiler's own (see test_compile.py)
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_compiled_step_benchmark_writes_its_rows(tmp_path):
    from experiments.bench import compiled_step

    assert compiled_step.main(["--quick", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "compiled_step_quick.json").read_text())
    assert [r["name"].split(" (O(")[0] for r in record["rows"]] == [
        "group RNN training step tokens/s, eager / matched LSTM",
        "group RNN training step tokens/s, compiled (aot_eager) / eager",
        "group RNN training step tokens/s, compiled (aot_eager) / matched LSTM"]
    assert record["rows"][1]["compile_seconds"] > 0 and record["rows"][2]["target"] is None


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # inductor's import
def test_compile_probe_runs_and_its_compiled_exponential_is_exact(tmp_path):
    from experiments.bench import compile_probe

    assert compile_probe.main(["--quick", "--out", str(tmp_path)]) == 0
    (record,) = json.loads((tmp_path / "compile_probe_quick.json").read_text())["rows"]
    assert record["max_error"] < 1e-5


@pytest.mark.slow
def test_quick_memory_benchmark_writes_every_mode_and_the_gradient_error(tmp_path):
    from experiments.bench import memory

    memory.main(["--quick", "--out", str(tmp_path)])
    record = json.loads((tmp_path / "memory_quick.json").read_text())
    measured = [r for r in record["rows"] if "peak" in r and "mode" in r]
    assert {(r["mode"], r["recurrent"]) for r in measured} == \
        {(mode, recurrent) for mode in memory.MODES for recurrent in (True, False)} - {("loop", False)}
    assert all(r["peak"] > 0 for r in measured)
    steps = [r for r in record["rows"] if "checkpoint_activations" in r]
    assert {(r["model"], r["length"], r["checkpoint_activations"]) for r in steps} == \
        {(name, length, on) for name in memory.ACTIVATION_MODELS for length in (64, 256) for on in (False, True)}
    assert all(r["peak"] > 0 for r in steps)
    errors = [r["float32_gradient_error"] for r in record["rows"] if "float32_gradient_error" in r]
    assert len(errors) == 4 and all(0 < e < 1e-3 for e in errors)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's compiler's own (see test_compile.py)
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_the_device_check_runs_on_the_cpu_and_summarizes_parity_last(tmp_path, capsys):
    from experiments.bench import device_check

    parity = tmp_path / "parity.txt"
    parity.write_text("group_rnn-O-float32 pass\nmlstm-ns-float64 FAIL\n")
    assert device_check.main(["--device", "cpu", "--quick", "--out", str(tmp_path), "--parity", str(parity)]) == 1
    record = json.loads((tmp_path / "device_check_quick.json").read_text())
    assert record["parity"] == {"passed": 1, "total": 2, "failed": ["mlstm-ns-float64"]}
    assert [row["group"] for row in record["syncs"]] == list(GROUP_NAMES)
    assert all(row["syncs"] is None for row in record["syncs"])  # counted by CUDA only
    assert [row["group"] for row in record["captured"]] == list(GROUP_NAMES)
    assert all(row == {"group": row["group"], "captured": False, "max_difference": 0.0, "error": None}
               for row in record["captured"])  # the replay harness, uncaptured off CUDA
    assert [(row["model"][:5], row["batch"], row["mode"]) for row in record["throughput"]] == [
        ("O(24)", 8, "eager"), ("O(24)", 8, "compiled"), ("U(24)", 8, "eager"), ("T siz", 8, "eager"),
        ("BO 2×", 8, "eager")]  # quick: the first case compiled (aot_eager)
    assert all(row["tokens_per_second"] > 0 and row["lstm_tokens_per_second"] > 0 for row in record["throughput"])
    assert record["throughput"][1]["compile_seconds"] > 0 and record["throughput"][1]["backend"] == "aot_eager"
    output = capsys.readouterr().out.splitlines()
    saved = [index for index, line in enumerate(output) if line.startswith("saved ")]
    assert len(saved) == 1 and sum(line.startswith("measured ") for line in output[:saved[0]]) == 5
    assert output[saved[0] + 1] == "parity: 1/2 checks pass (failed: mlstm-ns-float64)"  # the table, last
    assert output[-1].lstrip().startswith("BO 2×2 blocks")
    parity.write_text("group_rnn-O-float32 pass\n")
    assert device_check.main(["--device", "cpu", "--quick", "--out", str(tmp_path), "--parity", str(parity)]) == 0


def test_the_device_check_keeps_what_it_measured_when_it_is_stopped(tmp_path, monkeypatch):
    from experiments.bench import device_check

    def stopped_after_one_row(device, quick):
        yield {"model": "O(24)", "batch": 8, "mode": "eager"}
        raise KeyboardInterrupt  # as a time limit's signal

    monkeypatch.setattr(device_check, "throughput", stopped_after_one_row)
    with pytest.raises(KeyboardInterrupt):
        device_check.main(["--device", "cpu", "--quick", "--out", str(tmp_path)])
    record = json.loads((tmp_path / "device_check_quick.json").read_text())
    assert len(record["syncs"]) == len(record["captured"]) == len(GROUP_NAMES)
    assert record["throughput"] == [{"model": "O(24)", "batch": 8, "mode": "eager"}]


def test_the_device_check_records_a_step_that_fails_to_compile_as_its_rows_error():
    from experiments.bench import device_check

    config = GroupRNNConfig(vocab_size=7, group="O", n=4, embedding_dim=3)
    failed = device_check.compiled_contender(config, torch.zeros(2, 5, dtype=torch.long), "no_such_backend",
                                             torch.device("cpu"))
    assert failed["backend"] == "no_such_backend" and "no_such_backend" in failed["error"] and "step" not in failed
    row = {"model": "O(4)", "batch": 2, "mode": "compiled", **failed}
    assert "FAIL: " in device_check.table({"syncs": [], "captured": [], "captured_steps": [],
                                           "throughput": [row]}).splitlines()[-1]


def test_the_device_check_times_and_compares_training_steps_from_cuda_graphs(capturable_anywhere, monkeypatch):
    """``train --cuda-graphs``'s step, with the graphs replaced by calls (``test_captured_step.Graphs``):
    the same bits as the eager steps, and a contender to time once warmed up and captured."""
    from experiments.bench import device_check

    graphs = Graphs()
    monkeypatch.setattr(cuda_graphs, "capture", graphs.capture)
    monkeypatch.setattr(cuda_graphs, "on_side_stream", graphs.side_stream)
    rows = [device_check.captured_training_steps(group, torch.device("cpu")) for group in ("O", "U", "BO")]
    assert rows == [{"group": group, "max_difference": 0.0, "eager_difference": 0.0, "error": None}
                    for group in ("O", "U", "BO")]
    assert graphs.counts["captures"] == 2 * len(rows)
    config = GroupRNNConfig(vocab_size=7, group="O", n=4, embedding_dim=3)
    contender = device_check.captured_contender(config, torch.zeros(2, 5, dtype=torch.long), torch.device("cpu"))
    assert contender["capture_seconds"] > 0
    contender["step"]()
    assert graphs.counts["captures"] == 2 * len(rows) + 2
    lines = device_check.table({"syncs": [], "captured": [], "captured_steps": rows, "throughput": []}).splitlines()
    assert lines[3] == "  O   0 (eager's own 0)"


def test_the_device_check_on_cuda_without_a_gpu_stops_with_a_clear_error(capsys):
    from experiments.bench import device_check

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the refusal path cannot be exercised")
    with pytest.raises(SystemExit):
        device_check.main(["--device", "cuda"])
    assert "no CUDA device is available" in capsys.readouterr().err


def test_quick_precision_benchmark_writes_speed_bits_and_drift_rows_for_every_model(tmp_path):
    from experiments.bench import precision

    assert precision.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "precision_quick.json").read_text())["rows"]
    for name in precision.MODELS:
        assert sum(r["name"].startswith(f"{name} training tokens/s, bf16 / float32") for r in rows) == 1, name
        (bits,) = [r for r in rows if r["name"].startswith(f"{name} validation bits after 2 steps")]
        assert bits["ratio"] == pytest.approx(bits["valid_bits"]["bf16"] - bits["valid_bits"]["float32"])
        assert bits["lr"] == precision.MODELS[name][1].get("lr", precision.LR), name
        assert f"at lr {bits['lr']:g}" in bits["name"], name
    assert precision.MODELS["group RNN O(16)"][1]["lr"] == 1e-3  # O(16) diverges at the common 3e-3
    (drift,) = [r for r in rows if "state drift" in r["name"]]
    assert drift["within_tolerance"] and 0 < drift["drift"]["bf16"] <= drift["tolerance"]
    assert all(r["ratio"] > 0 for r in rows if "tokens/s" in r["name"])


@pytest.mark.slow
def test_quick_data_parallel_benchmark_writes_the_two_rank_rows(tmp_path):
    from experiments.bench import data_parallel

    assert data_parallel.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "data_parallel_quick.json").read_text())["rows"]
    assert len(rows) == 2 * len(data_parallel.MODELS)
    for result in rows:
        rates = result["tokens_per_second"]
        assert set(rates) == {"1 process", "1 process, 1 thread", "2 ranks, 1 thread each"}
        single = "1 process, 1 thread" if result["name"].split(" / ")[1].startswith("1 process, 1 thread") else "1 process"
        assert result["ratio"] == pytest.approx(rates["2 ranks, 1 thread each"] / rates[single])
