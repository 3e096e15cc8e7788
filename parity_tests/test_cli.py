"""Every ``python -m`` entry point: a ``--help`` that describes it in whole sentences and gives every
option a help line, and argparse's one-line refusal (exit code 2) of an unknown option."""

import contextlib
import importlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def entry_points():
    """``{module: command}`` for every file of experiments/ and parity_tests/ run as ``python -m``."""
    found = {}
    for path in sorted([*ROOT.glob("experiments/**/*.py"), *ROOT.glob("parity_tests/*.py")]):
        if re.search(r'^if __name__ == "__main__":', path.read_text(), re.MULTILINE):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[module] = module.removesuffix(".__main__")
    return found


ENTRY_POINTS = entry_points()


def call(module, argv):
    """``(exit code, stdout, stderr)`` of ``module.main(argv)``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = importlib.import_module(module).main(argv)
        except SystemExit as stop:
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def test_the_entry_points_are_found():
    assert {"experiments.train", "experiments.sweep", "experiments.bench", "parity_tests.check"} <= set(ENTRY_POINTS.values())
    assert len(ENTRY_POINTS) >= 18


@pytest.mark.parametrize("module", list(ENTRY_POINTS))
def test_help_describes_the_command_and_every_option(module):
    code, text, _ = call(module, ["--help"])
    assert code == 0
    command = ENTRY_POINTS[module]
    assert re.match(rf"usage: python -m {re.escape(command)}\s", text), text[:200]
    description = text.split("\n\n")[1]
    assert description.rstrip().endswith((".", "?")) and "``" not in description, description
    lines = text.splitlines()
    for index, line in enumerate(lines):
        option = re.match(r"^  (-{1,2}[\w-]+.*?)(?:\s{2,}(\S.*))?$", line)
        if option and not option.group(2):  # help, if any, continues on the next line
            following = lines[index + 1] if index + 1 < len(lines) else ""
            assert re.match(r"^\s{6,}\S", following), f"{command}: option without help: {line.strip()}"


@pytest.mark.parametrize("module", list(ENTRY_POINTS))
def test_an_unknown_option_is_one_line_of_error_and_exit_code_2(module):
    code, _, err = call(module, ["--no-such-option"])
    assert code == 2
    message = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]
    assert len(message) == 1 and message[0].startswith(f"python -m {ENTRY_POINTS[module]}: error: "), err


@pytest.mark.parametrize("module", list(ENTRY_POINTS))
def test_no_command_writes_into_the_committed_results_unless_told_to(module):
    """A default ``--out`` never lies under experiments/results/ (the committed results are written
    there only by a command that names it)."""
    _, text, _ = call(module, ["--help"])
    block = re.search(r"^  --out\b(.*?)(?=^  -|\Z)", text, re.MULTILINE | re.DOTALL)
    default = re.search(r"\(default: ([^)]*)\)", " ".join(block.group(1).split())) if block else None
    written = "" if default is None else default.group(1)
    assert not written.startswith("experiments/results") and "OUT" not in written, written  # OUT: a study's results


@pytest.mark.parametrize("module, argv", [
    ("experiments.report", ["{missing}"]),
    ("experiments.studies.state_tracking.report", ["{missing}"]),
    ("experiments.studies.charlm_v2.claims", ["{missing}"]),
    ("experiments.studies.charlm_v2.context_probe", ["{missing}", "--out", "{missing}/out"]),
    ("experiments.studies.charlm_v2.state_spectrum", ["{missing}", "--out", "{missing}/out"]),
    ("experiments.sweep", ["no-such-sweep"]),
    ("experiments.bench.study_speed", ["no-such-sweep"]),
])
def test_inputs_that_are_not_there_are_one_line_of_error_and_exit_code_2(module, argv, tmp_path):
    code, _, err = call(module, [a.format(missing=tmp_path / "missing") for a in argv])
    assert code == 2
    message = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]
    assert len(message) == 1 and message[0].startswith(f"python -m {ENTRY_POINTS[module]}: error: "), err
    assert not (tmp_path / "missing").exists()
