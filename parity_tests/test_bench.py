"""The benchmark suite runs end to end (no timing is asserted: ratios are for the report)."""

import json

import pytest

from experiments.bench.__main__ import main
from experiments.bench.timing import alternate, row


def test_alternate_times_every_contender_and_row_checks_the_target():
    calls = []
    times = alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4 and set(times) == {"a", "b"}
    assert row("x", 2.0, ">=", 1.5)["met"] and not row("x", 2.0, "<=", 1.5)["met"]


def test_a_cuda_run_without_a_gpu_stops_with_a_clear_error(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the refusal path cannot be exercised")
    with pytest.raises(SystemExit) as stop:
        main(["--quick", "--device", "cuda", "--out", str(tmp_path)])
    assert stop.value.code == 2 and "no CUDA device" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_quick_suite_writes_every_row(tmp_path):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "bench_quick.json").read_text())
    assert {"cpus", "torch", "threads"} <= set(record["machine"])
    assert len(record["rows"]) == 8
    assert all({"name", "ratio", "target", "met"} <= set(r) for r in record["rows"])


def test_quick_scaling_curves_write_json_and_png(tmp_path):
    from experiments.bench import scaling

    assert scaling.main(["--quick", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "scaling_quick.json").read_text())
    assert set(record["curves"]) == {"length", "n"}
    for axis in ("length", "n"):
        for group in scaling.GROUPS:
            assert all(point["tokens_per_s"] > 0 for point in record["curves"][axis][group])
    assert (tmp_path / "scaling_quick.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # inductor's import
def test_compile_probe_runs_and_its_compiled_exponential_is_exact(tmp_path):
    from experiments.bench import compile_probe

    assert compile_probe.main(["--quick", "--out", str(tmp_path)]) == 0
    (record,) = json.loads((tmp_path / "compile_probe_quick.json").read_text())["rows"]
    assert record["max_error"] < 1e-5
