"""The README's commands run: its training lines with small step counts, the rest to their parsers."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SMALL = ["--steps", "2", "--eval-every", "2", "--checkpoint-every", "2", "--eval-tokens", "200", "--warmup", "0"]


def readme_commands():
    """Every ``.venv/bin/python -m module args`` line of the README's sh blocks, as (module, args)."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.DOTALL)
    commands = []
    for line in "\n".join(blocks).splitlines():
        line = line.split("  #")[0].strip()
        if line.startswith(".venv/bin/python -m "):
            words = shlex.split(line)
            commands.append((words[2], words[3:]))
    return commands


def with_small_steps(args):
    """``args`` with --steps, the evaluation sizes and the warm-up replaced by SMALL."""
    kept, skip = [], False
    for word in args:
        if skip:
            skip = False
        elif word in SMALL[::2]:
            skip = True
        else:
            kept.append(word)
    return kept + SMALL


def test_the_readme_lists_its_commands():
    modules = {module for module, _ in readme_commands()}
    assert {"experiments.train", "experiments.sweep", "experiments.report", "experiments.bench",
            "parity_tests.check"} <= modules


def test_the_readme_training_lines_train_and_resume(tmp_path, monkeypatch):
    from experiments import train

    trains = [args for module, args in readme_commands() if module == "experiments.train"]
    assert trains and any("--resume" in args for args in trains)
    first = None
    for index, args in enumerate(trains):
        if "--resume" in args:  # continue the first line's run, as the README does
            assert train.main(["--resume", str(first), "--steps", "4"]) == 0
            continue
        if "--help" in args:
            with pytest.raises(SystemExit) as stop:
                train.main(args)
            assert stop.value.code == 0
            continue
        directory = tmp_path / f"run{index}"
        assert train.main(with_small_steps(args) + ["--run-dir", str(directory)]) == 0, args
        assert (directory / "final.json").exists()
        first = directory if first is None else first


@pytest.mark.parametrize("module, args", [c for c in readme_commands()
                                          if c[0] not in ("experiments.train", "parity_tests.check")],
                         ids=lambda value: value if isinstance(value, str) else None)
def test_the_readme_sweep_report_and_bench_lines_name_real_commands(module, args):
    """The long-running lines (a sweep, a report of it, the benchmarks) are checked to their
    command-line parsers: the module exists and documents its options."""
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    for option in (word for word in args if word.startswith("--")):
        assert option.split("=")[0] in result.stdout, (module, option)


def test_the_readme_parity_check_passes():
    (module, args), = [c for c in readme_commands() if c[0] == "parity_tests.check"]
    result = subprocess.run([sys.executable, "-m", module, *args, "--length", "4"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and '"pass": true' in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
