"""Training runs: configuration, run directory, and exact resumption after a kill."""

import contextlib
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from experiments import train
from experiments.models import build_model
from experiments.training import config as training_config, loop, optim, rundir
from experiments.training.config import RunConfig, TrainConfig, build_config, resolve_device, step_memory_floor
from experiments.training.progress import Progress
from reference.config import GroupRNNConfig
from parity_tests.tolerances import RESUME_RTOL

ARGS = ["--model", "group_rnn", "--dataset", "ptb_char", "--group", "SO", "--n", "4", "--embedding-dim", "8",
        "--steps", "60", "--batch", "4", "--length", "16", "--eval-every", "5", "--checkpoint-every", "5",
        "--eval-tokens", "300", "--schedule", "cosine", "--warmup", "3", "--seed", "7"]
RECALL_ARGS = ["--model", "mlstm", "--task", "recall", "--vocab-size", "24", "--length", "16",
               "--embedding-dim", "8", "--steps", "60", "--batch", "4", "--eval-every", "5", "--checkpoint-every", "5", "--valid-sequences", "8",
               "--weight-decay", "0.01", "--clip", "none", "--warmup", "3", "--seed", "7"]


def metrics(directory):
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]


# O(17): the n-aware rates put W and U in AdamW groups of their own (map_lr_scales < 1 for both)
SCALED_ARGS = [*ARGS[:5], "O", "--n", "17", *ARGS[8:]]


@pytest.mark.parametrize("args, keys", [(ARGS, ("train_bits", "valid_bits")),
                                        ([*ARGS, "--dtype", "float64"], ("train_bits", "valid_bits")),
                                        (SCALED_ARGS, ("train_bits", "valid_bits")),
                                        (RECALL_ARGS, ("train_loss", "valid_accuracy"))],
                         ids=["lm", "lm-float64", "lm-scaled-maps", "recall"])
def test_a_killed_run_resumes_to_the_same_metrics(tmp_path, args, keys):
    """SIGKILL after the first checkpoint, then --resume: metrics and parameters bit for bit."""
    uninterrupted, killed = tmp_path / "uninterrupted", tmp_path / "killed"
    assert train.main([*args, "--run-dir", str(uninterrupted)]) == 0

    # the killed run trains on as many threads as this process (an earlier test may have set 1), so that
    # both sum in the same order
    threads = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    process = subprocess.Popen([sys.executable, "-m", "experiments.train", *args, "--run-dir", str(killed)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=threads)
    deadline = time.monotonic() + 300
    while not (killed / "checkpoint.pt").exists():
        assert process.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (killed / "final.json").exists(), "the run finished before it could be killed"
    assert len(metrics(killed)) < len(metrics(uninterrupted))

    assert train.main(["--resume", str(killed)]) == 0
    ours, theirs = metrics(killed), metrics(uninterrupted)
    assert [m["step"] for m in ours] == [m["step"] for m in theirs]
    for got, expected in zip(ours, theirs):
        for key in keys:
            assert got[key] == pytest.approx(expected[key], rel=RESUME_RTOL), (got["step"], key)
        assert got["drift"] == pytest.approx(expected["drift"], abs=RESUME_RTOL)
    final_state = torch.load(killed / "checkpoint.pt", weights_only=False)
    expected_state = torch.load(uninterrupted / "checkpoint.pt", weights_only=False)
    for key, value in expected_state["model"].items():
        torch.testing.assert_close(final_state["model"][key], value, rtol=RESUME_RTOL, atol=RESUME_RTOL)
    assert not list(killed.glob("*.tmp"))


def test_the_run_directory_records_the_run(tmp_path):
    directory = tmp_path / "run"
    assert train.main([*ARGS[:-10], "--steps", "4", "--eval-every", "2", "--checkpoint-every", "2",
                       "--eval-tokens", "100", "--run-dir", str(directory)]) == 0
    config = json.loads((directory / "config.json").read_text())
    assert config["train"]["steps"] == 4 and config["model"]["group"] == "SO" and config["model"]["n"] == 4
    assert "experiments.train" in (directory / "command.txt").read_text()
    assert (directory / "git_revision.txt").read_text().strip()
    assert [m["step"] for m in metrics(directory)] == [2, 4]
    final = json.loads((directory / "final.json").read_text())
    assert final["drift"] < 1e-5 and final["parameters"] > 0 and final["test_bits_per_token"] > 0
    assert refusal([*ARGS, "--run-dir", str(directory)]) == (
        f"{directory} already holds a run; continue it with --resume {directory}, or choose another directory "
        "with --run-dir")


def refusal(argv):
    """The one error line of ``train.main(argv)``, which must exit with argparse's code 2."""
    stderr = io.StringIO()
    with pytest.raises(SystemExit) as stop, contextlib.redirect_stderr(stderr):
        train.main(argv)
    assert stop.value.code == 2
    lines = stderr.getvalue().splitlines()
    assert lines[0].startswith("usage: ") and len(lines) == 2, lines
    return lines[1].removeprefix("python -m experiments.train: error: ")


@pytest.mark.parametrize("pairs, message", [
    (["--colour", "red"], "unrecognized arguments: --colour red"),
    (["--n", "four"], "argument --n: expected an integer (such as 1000 or 1e3), got 'four'"),
    (["--schedule", "linear"], "--schedule linear: unknown schedule 'linear'"),
    (["--steps", "0"], "--steps 0: steps must be a positive int"),
    (["--warmup", "100", "--steps", "10"], "--warmup 100, --steps 10: warmup must be"),
    (["--group", "Sp"], "--group Sp: unknown group 'Sp'"),
    (["--map-lr", "muP"], "--map-lr muP: unknown map_lr"),
    (["--recurrent", "maybe"], "argument --recurrent: expected true or false, got 'maybe'"),
    (["--steps", "1.5"], "argument --steps: expected an integer"),
], ids=["unknown-key", "bad-int", "schedule", "steps", "warmup", "group", "map-lr", "bool", "fraction"])
def test_bad_options_are_refused_before_training_in_one_line_naming_the_option(tmp_path, pairs, message):
    got = refusal(["--model", "group_rnn", "--dataset", "ptb_char", *pairs, "--run-dir", str(tmp_path / "x")])
    assert got.startswith(message), got
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("pairs, message", [
    (["--length", "512", "--eval-tokens", "500"],
     "--length 512 needs windows of 513 tokens, but --eval-tokens 500 evaluates on 501: raise --eval-tokens"),
    (["--dataset", "tinyshakespeare", "--length", "60000", "--eval-tokens", "60000"],
     "--length 60000 needs windows of 60001 tokens, but the valid split of --dataset tinyshakespeare has 55770"),
    (["--carried-streams", "10000000"], "--carried-streams 10000000 cuts the test split of --dataset ptb_char"),
], ids=["eval-shorter-than-a-window", "split-shorter-than-a-window", "carried-pieces"])
def test_windows_that_no_split_or_evaluation_holds_are_refused_before_training(tmp_path, pairs, message):
    got = refusal(["--model", "group_rnn", "--dataset", "ptb_char", *pairs, "--steps", "1",
                   "--run-dir", str(tmp_path / "x")])
    assert got.startswith(message), got
    assert not (tmp_path / "x").exists()


def test_a_step_that_needs_more_memory_than_the_device_has_is_refused_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(training_config, "device_memory", lambda device: 2 ** 30)  # a 1 GiB machine
    argv = ["--model", "group_rnn", "--dataset", "ptb_char", "--group", "U", "--n", "8", "--keep-state-every", "4",
            "--batch", "512", "--length", "8192", "--eval-tokens", "8192", "--run-dir", str(tmp_path / "x")]
    config = RunConfig(TrainConfig(model="group_rnn", batch=512), None,
                       GroupRNNConfig(vocab_size=50, group="U", n=8, keep_state_every=4))
    tokens = 512 * 8192
    assert step_memory_floor(config, 8192) == 4 * (2 * tokens * 50 + tokens * 64 * 2 // 4)  # closed form
    got = refusal(argv)
    assert got.startswith("--batch 512 with training sequences of 8192 tokens needs at least 2.1 GiB for one step"), got
    assert "more than the 1.0 GiB of --device cpu" in got and not (tmp_path / "x").exists()
    monkeypatch.setattr(training_config, "device_memory", lambda device: 2 ** 40)
    assert train.configure(argv)[0].train.batch == 512


@pytest.mark.parametrize("argv, sized", [
    (["--model", "lstm", "--params", "1e5"], {}),
    (["--model", "gpt", "--params", "200000", "--num-heads", "2"], {"num_heads": 2}),
    (["--model", "group_rnn", "--group", "O", "--n", "8", "--params", "5e4"], {"n": 8}),  # n fixed: the width moves
], ids=["lstm", "gpt", "group_rnn-fixed-n"])
def test_params_sizes_the_model_to_a_budget_from_the_command_line(argv, sized, tmp_path):
    from experiments.params_budget import TOLERANCE, parameter_count

    config = train.configure([*argv, "--dataset", "ptb_char", "--run-dir", str(tmp_path / "x")])[0]
    budget = int(float(argv[argv.index("--params") + 1]))
    assert abs(parameter_count(config.model) - budget) <= TOLERANCE * budget
    assert all(getattr(config.model, key) == value for key, value in sized.items())


def test_params_refuses_what_it_cannot_size(tmp_path):
    argv = ["--dataset", "ptb_char", "--params", "1e5", "--run-dir", str(tmp_path / "x")]
    assert refusal(["--model", "mlstm", *argv]).startswith("--params sizes the models group_rnn")
    assert refusal(["--model", "lstm", "--hidden-size", "8", "--embedding-dim", "8", *argv]) == (
        "--params sets --hidden-size and --embedding-dim itself: give at most one of them with it")


def test_the_progress_bar_shows_the_training_metrics_and_the_last_validation_score():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = Progress("r", 4, 0, stream=stream, selection_key="valid_bits")
    progress.start("what runs")
    progress.step(1, {"train_bits": 3.0}, 100.0, 0.5)
    progress.evaluation({"step": 1, "train_bits": 3.0, "valid_bits": 2.5}, 100.0)
    progress.step(2, {"train_bits": 2.9}, 100.0, 1.0)
    progress.close()
    text = stream.getvalue()
    assert "r: what runs" in text and "the first step took 0.50 s; the 3 left should take about 2 s" in text
    assert "train_bits=2.900" in text and "valid_bits=2.500" in text


def test_the_command_line_takes_key_equals_value_bare_and_negated_booleans_and_1e3_for_integers():
    options = train.parse_options("group_rnn", "lm", ["--steps=1e3", "--no-recurrent", "--n=16", "--clip", "none",
                                                      "--lr", "3e-4", "--dataset=ptb_char"])
    assert options == {"steps": 1000, "recurrent": False, "n": 16, "clip": None, "lr": 3e-4, "dataset": "ptb_char"}
    assert type(options["steps"]) is int
    assert train.parse_options("group_rnn", "lm", ["--recurrent"]) == {"recurrent": True}
    assert train.parse_options("group_rnn", "lm", ["--recurrent", "False"]) == {"recurrent": False}  # command.txt's form
    assert train.parse_options("gpt", "lm", []) == {}
    assert train.parse_options("group_rnn", "lm", ["--eval_every", "2"]) == {"eval_every": 2}  # older records' spelling


def test_a_model_option_without_a_default_is_asked_for_by_name(tmp_path):
    assert refusal(["--model", "lstm", "--dataset", "ptb_char"]) == "--model lstm needs --hidden-size"
    assert refusal(["--model", "gpt", "--dataset", "ptb_char"]) == "--model gpt needs --width"


@pytest.mark.parametrize("argv", [[], ["--model", "group_rnn"], ["--model", "mlstm", "--task", "recall"]],
                         ids=["train", "group_rnn", "mlstm-recall"])
def test_help_lists_every_option_of_the_configs_with_its_type_and_default(argv, capsys):
    from experiments.cli import field_help
    from experiments.models import MODEL_CONFIGS
    from experiments.tasks import task_class

    with pytest.raises(SystemExit) as stop:
        train.main([*argv, "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    model = argv[1] if argv else None
    task = argv[3] if len(argv) > 3 else "lm"
    configs = [TrainConfig, task_class(task).Config] + ([MODEL_CONFIGS[model]] if model else [])
    for config in configs:
        assert config.__name__ in text
        for field in dataclasses.fields(config):
            if field.name in ("model", "task", "vocab_size") and config is not task_class(task).Config:
                continue
            help_line = " ".join(field_help(config)[field.name].replace("``", "").split())
            assert help_line, (config.__name__, field.name)
            default = "required" if field.default is dataclasses.MISSING else f"default: {field.default}"
            assert f"--{field.name.replace('_', '-')}" in text and f"{help_line} (" in text and default in text
    if model is None:
        assert "--model M --help lists them" in text


def test_learning_rate_schedule():
    config = TrainConfig(model="group_rnn", steps=10, warmup=2, schedule="cosine")
    factors = [optim.learning_rate_factor(config, step) for step in range(10)]
    assert factors[:2] == [0.5, 1.0] and factors[2] == 1.0 and factors[-1] < 0.05
    assert all(a >= b for a, b in zip(factors[1:], factors[2:]))
    constant = TrainConfig(model="group_rnn", steps=10, schedule="constant")
    assert {optim.learning_rate_factor(constant, step) for step in range(10)} == {1.0}


def test_a_preset_run_trains_with_overrides(tmp_path):
    """--preset SWEEP/RUN takes the run's model, dataset and options; later pairs override them."""
    from experiments.train import main

    run_dir = tmp_path / "lstm"
    assert main(["--preset", "charlm-ptb/lstm-seed1", "--steps", "2", "--warmup", "1", "--batch", "2", "--length", "8",
                 "--eval-every", "2", "--eval-tokens", "40", "--checkpoint-every", "2", "--run-dir", str(run_dir)]) == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["train"]["model"] == "lstm" and config["task"]["dataset"] == "ptb_char"
    assert config["train"]["seed"] == 1 and config["train"]["steps"] == 2 and config["train"]["lr"] == 1e-3
    assert refusal(["--preset", "charlm-ptb/lstm-seed9"]).startswith("no run 'lstm-seed9' in charlm-ptb")
    recall_dir = tmp_path / "recall"  # a recall run of a preset is an ordinary training run
    assert main(["--preset", "nar-cpu/V48-L64-lr0.01-ns-cosine-seed0", "--steps", "2", "--batch", "2", "--length", "8",
                 "--valid-sequences", "2", "--eval-every", "2", "--run-dir", str(recall_dir)]) == 0
    config = json.loads((recall_dir / "config.json").read_text())
    assert config["train"]["task"] == "recall" and config["model"]["read"] == "ns" and config["train"]["clip"] is None
    assert config["train"]["weight_decay"] == 0.01 and config["task"]["vocab_size"] == 48


TUNED_PRESET = """
from experiments.sweep_run import SweepRun, Tuning
OUT = {out!r}
TUNING = Tuning(rates=(1e-3, 3e-2))
RUNS = [SweepRun("lstm-seed0", "lstm", "lm", {{"lr": 1e-3, "seed": 0}})]
"""


def _lr(argv):
    return float(argv[argv.index("--lr") + 1])


def test_a_preset_run_defaults_to_its_own_directory(tmp_path, monkeypatch):
    """Without --run-dir a preset run goes to runs/<SWEEP>/<RUN>, beside (not into) the
    runs/<model>-<task>-seed<seed> of a plain run of the same model and seed."""
    monkeypatch.chdir(tmp_path)
    small = ["--steps", "2", "--warmup", "1", "--batch", "2", "--length", "8", "--eval-every", "2",
             "--eval-tokens", "40", "--checkpoint-every", "2"]
    assert train.main(["--model", "lstm", "--dataset", "ptb_char", "--hidden-size", "4", "--seed", "1", *small]) == 0
    assert train.main(["--preset", "charlm-ptb/lstm-seed1", *small]) == 0
    assert (tmp_path / "runs" / "lstm-lm-seed1" / "final.json").exists()
    config = json.loads((tmp_path / "runs" / "charlm-ptb" / "lstm-seed1" / "config.json").read_text())
    assert config["model"]["hidden_size"] != 4 and config["train"]["seed"] == 1


def test_a_tuned_presets_run_takes_its_arms_chosen_rate_once_chosen(tmp_path):
    sweep = tmp_path / "tuned.py"
    sweep.write_text(TUNED_PRESET.format(out=str(tmp_path / "out")))
    assert _lr(train.preset_argv(f"{sweep}/lstm-seed0")) == 1e-3  # not chosen yet: the placeholder
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chosen_rates.json").write_text(json.dumps({"lstm": {"lr": 3e-2}}))
    assert _lr(train.preset_argv(f"{sweep}/lstm-seed0")) == 3e-2


@pytest.mark.parametrize("dataset, preset", [("ptb_char", "charlm-v2-ptb"), ("tinyshakespeare", "charlm-v2-shakespeare")])
def test_the_preset_of_every_committed_v2_study_run_rebuilds_its_config(dataset, preset):
    """``--preset charlm-v2-<dataset>/<run>`` gives the committed run's config, its arm's chosen rate included."""
    configs = sorted((Path("experiments/results/charlm_v2") / dataset).glob("*/config.json"))
    assert len(configs) == 33  # 11 arms × 3 seeds
    for path in configs:
        args, rest = train.build_parser(options=False).parse_known_args(train.preset_argv(f"{preset}/{path.parent.name}"))
        built = build_config(args.model, args.task, train.parse_options(args.model, args.task, rest))
        built = dataclasses.replace(built, train=dataclasses.replace(built.train, device="cpu"))
        assert built == RunConfig.from_json(json.loads(path.read_text())), path.parent.name


class RunsCodeWhenUnpickled:
    """An object whose unpickling would create ``path``: what a hostile checkpoint could carry."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_checkpoint_holding_a_pickled_object_is_refused(tmp_path):
    directory = tmp_path / "run"
    assert train.main([*ARGS[:-10], "--steps", "2", "--eval-every", "2", "--checkpoint-every", "2",
                       "--eval-tokens", "100", "--run-dir", str(directory)]) == 0
    state = torch.load(directory / "checkpoint.pt", weights_only=True)  # the run's own checkpoint: plain data
    assert isinstance(state["numpy_rng"], str) and isinstance(state["torch_rng"], torch.Tensor)
    marker = tmp_path / "code-ran"
    state["numpy_rng"] = RunsCodeWhenUnpickled(marker)
    torch.save(state, directory / "checkpoint.pt")
    with pytest.raises(ValueError, match="refusing to load .*pickled object"):
        train.main(["--resume", str(directory)])
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["empty", "cut-short"])
def test_a_damaged_checkpoint_is_refused_naming_the_file(tmp_path, damage):
    directory = tmp_path / "run"
    assert train.main([*ARGS[:-10], "--steps", "2", "--eval-every", "2", "--checkpoint-every", "2",
                       "--eval-tokens", "100", "--run-dir", str(directory)]) == 0
    whole = (directory / "checkpoint.pt").read_bytes()
    (directory / "checkpoint.pt").write_bytes(b"" if damage == "empty" else whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"checkpoint.pt is not a whole checkpoint .*delete it"):
        train.main(["--resume", str(directory)])


def test_a_checkpoint_with_a_negative_step_is_refused_and_the_metrics_kept(tmp_path):
    directory = tmp_path / "run"
    assert train.main([*ARGS[:-10], "--steps", "2", "--eval-every", "2", "--checkpoint-every", "2",
                       "--eval-tokens", "100", "--run-dir", str(directory)]) == 0
    metrics = (directory / "metrics.jsonl").read_text()
    state = torch.load(directory / "checkpoint.pt", weights_only=True)
    state["step"] = -5
    torch.save(state, directory / "checkpoint.pt")
    with pytest.raises(ValueError, match=r"its step is -5, not an int ≥ 0"):
        train.main(["--resume", str(directory), "--steps", "4"])
    assert (directory / "metrics.jsonl").read_text() == metrics


def test_a_checkpoint_without_its_config_is_refused_before_any_work(tmp_path):
    directory = tmp_path / "run"
    assert train.main([*ARGS[:-10], "--steps", "2", "--eval-every", "2", "--checkpoint-every", "2",
                       "--eval-tokens", "100", "--run-dir", str(directory)]) == 0
    before = {path.name: path.read_bytes() for path in directory.iterdir() if path.name != "checkpoint.pt"}
    state = torch.load(directory / "checkpoint.pt", weights_only=True)
    del state["config"]
    torch.save(state, directory / "checkpoint.pt")
    with pytest.raises(ValueError, match=r"checkpoint.pt is not a checkpoint of this trainer: it lacks config"):
        train.main(["--resume", str(directory), "--steps", "4"])
    assert {path.name: path.read_bytes() for path in directory.iterdir() if path.name != "checkpoint.pt"} == before


def short_run(directory, steps=4):
    assert train.main([*ARGS[:-10], "--steps", str(steps), "--eval-every", "2", "--checkpoint-every", "2",
                       "--eval-tokens", "100", "--run-dir", str(directory)]) == 0
    return directory


@pytest.mark.parametrize("part, field, value", [("model", "group", "O"), ("train", "dtype", "float64"),
                                                ("task", "dataset", "tinyshakespeare"), ("train", "lr", 5.0)],
                         ids=["group", "dtype", "dataset", "lr"])
def test_a_resume_refuses_an_edited_config(tmp_path, part, field, value):
    """The checkpoint holds its configuration: config.json edited before a resume is refused, naming the field."""
    directory = short_run(tmp_path / "run")
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config[part][field] = value
    path.write_text(json.dumps(config))
    before = (directory / "metrics.jsonl").read_text(), (directory / "checkpoint.pt").read_bytes()
    with pytest.raises(ValueError, match=f"cannot resume .*{part}\\.{field} is {value!r} here but"):
        train.main(["--resume", str(directory)])
    assert ((directory / "metrics.jsonl").read_text(), (directory / "checkpoint.pt").read_bytes()) == before
    assert not (directory / "resumes.jsonl").exists()


@pytest.mark.parametrize("pairs, message", [
    (["--no-such-flag", "1"], "unrecognized arguments: --no-such-flag 1"),
    (["--lr", "5"], "a resume cannot change '--lr'"),
    (["--group", "O"], "a resume cannot change '--group'"),
    (["--steps", "3"], None),
    (["--model", "lstm"], "--resume DIR takes the run's model, task, size and directory from DIR"),
], ids=["unknown", "lr", "group", "fewer-steps", "model"])
def test_a_resume_refuses_options_it_cannot_honour(tmp_path, pairs, message):
    directory = short_run(tmp_path / "run")
    before = (directory / "metrics.jsonl").read_text()
    if message is None:  # found when the checkpoint is read
        with pytest.raises(ValueError, match="with steps 3: its checkpoint is at step 4"):
            train.main(["--resume", str(directory), *pairs])
    else:
        assert refusal(["--resume", str(directory), *pairs]).startswith(message)
    assert (directory / "metrics.jsonl").read_text() == before and not (directory / "resumes.jsonl").exists()


def test_a_resume_with_more_steps_trains_on_and_records_it(tmp_path):
    directory = short_run(tmp_path / "run")
    assert train.main(["--resume", str(directory), "--steps", "6", "--eval-every", "3"]) == 0
    assert [m["step"] for m in metrics(directory)] == [2, 4, 6]
    assert json.loads((directory / "config.json").read_text())["train"]["steps"] == 6
    (resume,) = [json.loads(line) for line in (directory / "resumes.jsonl").read_text().splitlines()]
    assert resume["step"] == 4 and resume["overrides"] == {"train.eval_every": [2, 3], "train.steps": [4, 6]}
    assert resume["command"] == ["--resume", str(directory), "--steps", "6", "--eval-every", "3"]
    assert json.loads((directory / "final.json").read_text())["steps"] == 6


def files(directory):
    """Every file's bytes in ``directory`` (a resume that changes nothing leaves these equal)."""
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}


def test_resuming_a_finished_run_changes_nothing_and_says_so(tmp_path, capsys):
    """Nothing is left to train: exit 0, every file's bytes as they were (best.pt and final.json
    included), a line saying the run is finished, and no "steps 5–4"."""
    directory = short_run(tmp_path / "run")
    before = files(directory)
    capsys.readouterr()
    assert train.main(["--resume", str(directory)]) == 0
    assert files(directory) == before
    stderr = capsys.readouterr().err
    assert stderr.startswith(f"{directory} finished at step 4 (final.json): nothing to train") and "–" not in stderr


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "unfinished"])
def test_a_resume_without_a_checkpoint_is_refused_in_one_line_touching_nothing(tmp_path, finished):
    """A deleted checkpoint (of a finished run asked for more steps, or of one that was still
    training) cannot be continued: one line naming the directory and checkpoint.pt, every file as it was."""
    directory = short_run(tmp_path / "run")
    (directory / "checkpoint.pt").unlink()
    if not finished:
        (directory / "final.json").unlink()
    before = files(directory)
    line = refusal(["--resume", str(directory), *(["--steps", "6"] if finished else [])])
    assert line.startswith(f"cannot resume {directory}: it has no checkpoint.pt to continue from"), line
    assert files(directory) == before


def test_a_finished_run_without_a_checkpoint_resumes_as_finished_and_is_not_trained_anew(tmp_path, capsys):
    """No checkpoint, but final.json at its configured steps: a resume says it is finished; a new
    run pointed at the directory is refused; the library's ``run`` asked for more steps refuses too."""
    directory = short_run(tmp_path / "run")
    (directory / "checkpoint.pt").unlink()
    before = files(directory)
    assert train.main(["--resume", str(directory)]) == 0
    assert capsys.readouterr().err.endswith("nothing to train; it has no checkpoint.pt to continue from\n")
    assert refusal([*ARGS[:-10], "--steps", "4", "--run-dir", str(directory)]).startswith(
        f"{directory} already holds a run")
    config = train.resume_config(directory, ["--steps", "6"])
    with pytest.raises(ValueError, match=f"cannot continue {directory} to step 6: it holds a finished run without"):
        loop.run(config, directory)
    assert files(directory) == before


def test_a_finished_run_resumed_with_more_steps_continues_it(tmp_path):
    directory = short_run(tmp_path / "run")
    assert train.main(["--resume", str(directory), "--steps", "6"]) == 0
    assert [m["step"] for m in metrics(directory)] == [2, 4, 6]
    assert json.loads((directory / "final.json").read_text())["steps"] == 6


def test_a_run_directory_in_use_is_refused(tmp_path):
    """Another process holds the directory's lock (as a training process does): a resume is refused
    before it writes anything; once that process is gone, the resume runs."""
    directory = short_run(tmp_path / "run", steps=2)
    with subprocess.Popen([sys.executable, "-c", "import sys, filelock; lock = filelock.FileLock(sys.argv[1]); "
                           "lock.acquire(); print('held', flush=True); sys.stdin.read()",
                           str(directory / rundir.LOCK_FILE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as holder:
        try:
            assert holder.stdout.readline().strip() == "held"
            before = (directory / "metrics.jsonl").read_text()
            with pytest.raises(ValueError, match="is in use: another process holds its lock"):
                train.main(["--resume", str(directory), "--steps", "4"])
            assert (directory / "metrics.jsonl").read_text() == before and not (directory / "resumes.jsonl").exists()
        finally:
            holder.kill()
    assert train.main(["--resume", str(directory), "--steps", "4"]) == 0
    assert [m["step"] for m in metrics(directory)] == [2, 4]


def test_a_torn_last_metrics_line_is_dropped_on_resume(tmp_path):
    directory = short_run(tmp_path / "run")
    with open(directory / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 5, "train_bi')  # killed while writing step 5's line, after the step-4 checkpoint
    assert train.main(["--resume", str(directory), "--steps", "6"]) == 0
    assert [m["step"] for m in metrics(directory)] == [2, 4, 6]


def test_a_damaged_metrics_line_is_refused_naming_it(tmp_path):
    directory = short_run(tmp_path / "run")
    lines = (directory / "metrics.jsonl").read_text().splitlines()
    (directory / "metrics.jsonl").write_text("\n".join(["{not json", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match="metrics.jsonl, line 1: not a JSON record"):
        train.main(["--resume", str(directory), "--steps", "6"])


def test_metrics_are_rewritten_atomically_on_resume(tmp_path, monkeypatch):
    """A resume that dies while it rewrites metrics.jsonl (here: at the rename) leaves the old file whole."""
    directory = short_run(tmp_path / "run")
    with open(directory / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 6}) + "\n")  # evaluated after the last checkpoint
    before = (directory / "metrics.jsonl").read_text()

    renames = []

    def killed(*args):
        renames.append(args)
        raise KeyboardInterrupt

    monkeypatch.setattr(rundir.os, "replace", killed)  # the rename of rundir.atomic_write_bytes
    with pytest.raises(KeyboardInterrupt):
        train.main(["--resume", str(directory), "--steps", "6"])
    assert renames and renames[0][1] == directory / "metrics.jsonl"  # the patch stopped that rename
    assert (directory / "metrics.jsonl").read_text() == before
    monkeypatch.undo()
    assert train.main(["--resume", str(directory), "--steps", "6"]) == 0
    assert [m["step"] for m in metrics(directory)] == [2, 4, 6]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="a full disk is simulated with Linux's /dev/full")
def test_a_full_disk_is_an_error_naming_the_path_and_leaves_no_temporary_file(tmp_path):
    """The checkpoint's temporary file is a link to /dev/full, whose every write fails with ENOSPC."""
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "checkpoint.pt.tmp").symlink_to("/dev/full")
    with pytest.raises(OSError, match=r"cannot write .*checkpoint\.pt: No space left on device \(ENOSPC\)"):
        short_run(directory)
    assert not list(directory.glob("*.tmp")) and not (directory / "checkpoint.pt").exists()


def test_progress_off_a_terminal_says_what_runs_how_long_it_should_take_then_one_line_per_evaluation(
        tmp_path, capsys):
    assert train.main([*ARGS[:-10], "--steps", "6", "--eval-every", "3", "--checkpoint-every", "6",
                       "--eval-tokens", "100", "--run-dir", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("run: group_rnn (") and "parameters), task lm on ptb_char, steps 1–6 of batch" in lines[0]
    assert lines[1].startswith("run: the first step took ") and "the 5 left should take about" in lines[1]
    assert lines[2].startswith("run step 3/6 train_bits ") and "valid_bits" in lines[3]
    assert "tokens/s" in lines[2]


@pytest.mark.parametrize("model, shown", [(["--model", "group_rnn", "--group", "SO", "--n", "3"], True),
                                           (["--model", "group_rnn", "--group", "GL", "--n", "3"], False),
                                           (["--model", "lstm", "--hidden-size", "4"], False)], ids=["SO", "GL", "lstm"])
def test_progress_shows_the_drift_only_for_a_model_with_a_compact_group_state(tmp_path, capsys, model, shown):
    assert train.main([*model, "--dataset", "ptb_char", "--steps", "2", "--batch", "1", "--length", "8",
                       "--eval-every", "2", "--eval-tokens", "20", "--run-dir", str(tmp_path / "run")]) == 0
    evaluation = [line for line in capsys.readouterr().err.splitlines() if line.startswith("run step 2/2")]
    assert len(evaluation) == 1 and (" drift " in evaluation[0]) == shown, evaluation


@pytest.mark.parametrize("variable", ["empty-data-dir", "no-network"])
def test_missing_tiny_shakespeare_is_refused_in_one_line_saying_where_to_put_it(tmp_path, monkeypatch, variable):
    import urllib.error
    import urllib.request

    if variable == "empty-data-dir":
        monkeypatch.setenv("GROUPSTATE_DATA_DIR", str(tmp_path / "empty"))
    else:  # no data directory, nothing cached, and a download that cannot reach the network
        monkeypatch.delenv("GROUPSTATE_DATA_DIR", raising=False)
        monkeypatch.setenv("GROUPSTATE_CACHE_DIR", str(tmp_path / "cache"))

        def offline(*args, **kwargs):
            raise urllib.error.URLError("no network")
        monkeypatch.setattr(urllib.request, "urlopen", offline)
    got = refusal(["--model", "lstm", "--hidden-size", "4", "--dataset", "tinyshakespeare", "--steps", "1",
                   "--run-dir", str(tmp_path / "x")])
    assert "tinyshakespeare/input.txt" in got and "GROUPSTATE_DATA_DIR" in got, got
    assert not (tmp_path / "x").exists()


def test_a_preset_run_with_steps_below_its_warmup_is_refused_naming_both(tmp_path):
    got = refusal(["--preset", "charlm-v2-ptb/lstm-seed0", "--steps", "20", "--run-dir", str(tmp_path / "x")])
    assert got.startswith("--steps 20, --warmup 50: warmup must be an int in [0, steps)"), got


@pytest.mark.parametrize("model", ["group_rnn", "group_transformer"])
def test_the_group_options_help_lists_the_groups(model, capsys):
    from reference.config import GROUP_NAMES

    with pytest.raises(SystemExit):
        train.main(["--model", model, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"--group STR the state's group. (one of {', '.join(GROUP_NAMES)};" in text


def test_device_auto_is_resolved_when_the_run_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = build_config("lstm", "lm", {"dataset": "ptb_char", "hidden_size": 4, "steps": 1, "batch": 1,
                                         "length": 4, "eval_tokens": 8, "device": "auto"})
    assert config.train.device == "auto"
    loop.run(config, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["device"] == "cpu"
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="--device cuda:1: .*no CUDA device"):
        resolve_device("cuda:1")  # refused before any work, not an AssertionError deep in torch
    with pytest.raises(ValueError, match="no CUDA device"):
        loop.run(dataclasses.replace(config, train=dataclasses.replace(config.train, device="cuda")), tmp_path / "r2")
    assert not (tmp_path / "r2").exists()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("cuda:1") == "cuda:1"


def test_option_names_are_unambiguous_across_every_model_and_task():
    from experiments.models import MODEL_CONFIGS
    from experiments.tasks import task_classes

    for model in MODEL_CONFIGS:
        for task in task_classes():
            train.parse_options(model, task, [])  # raises if a field name is in two configs


def test_a_run_without_a_checkpoint_starts_over_without_stale_metrics(tmp_path):
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "metrics.jsonl").write_text(json.dumps({"step": 2, "train_bits": 9.0}) + "\n")  # a died attempt
    config = build_config("lstm", "lm", {"dataset": "ptb_char", "hidden_size": 4, "steps": 2, "batch": 1,
                                         "length": 4, "eval_tokens": 8, "eval_every": 2})
    loop.run(config, directory)
    assert [m["train_bits"] != 9.0 for m in metrics(directory)] == [True]
    other = build_config("lstm", "lm", {"dataset": "ptb_char", "hidden_size": 5, "steps": 2, "batch": 1,
                                        "length": 4, "eval_tokens": 8})
    with pytest.raises(ValueError, match="cannot resume .*model.hidden_size is 5 here but 4 in the checkpoint"):
        loop.run(other, directory)


def test_the_best_validation_model_is_kept_and_tested(tmp_path, monkeypatch):
    """Selection reads only ``selection_key``: with scripted scores 3, 1, 2, 5 the model of the second
    evaluation is kept, and re-evaluating it reproduces that evaluation's validation bits."""
    from experiments.tasks.lm import LanguageModelling

    scores = iter([3.0, 1.0, 2.0, 5.0])
    original = loop.Run._log

    def log_with_script(self, record):
        original(self, record)
        record["scripted"] = next(scores)

    monkeypatch.setattr(loop.Run, "_log", log_with_script)
    monkeypatch.setattr(LanguageModelling, "selection_key", "scripted")
    directory = tmp_path / "run"
    assert train.main([*ARGS[:-10], "--steps", "8", "--eval-every", "2", "--checkpoint-every", "2",
                       "--eval-tokens", "200", "--lr", "0.03", "--run-dir", str(directory)]) == 0
    records = {m["step"]: m for m in metrics(directory)}
    final = json.loads((directory / "final.json").read_text())
    assert final["best_step"] == 4 and final["steps"] == 8
    assert final["valid_bits"] == pytest.approx(records[4]["valid_bits"], rel=1e-6)
    assert final["valid_bits"] != pytest.approx(records[8]["valid_bits"], rel=1e-6)  # not the last model
    best = torch.load(directory / "best.pt", weights_only=True)
    assert best["step"] == 4 and best["score"] == 1.0
    checkpoint = torch.load(directory / "checkpoint.pt", weights_only=True)
    assert checkpoint["best"]["step"] == 4 and checkpoint["step"] == 8


def test_a_non_finite_loss_stops_the_run_and_the_best_finite_model_is_tested(tmp_path, monkeypatch):
    """A NaN poisoned into the embedding after step 3 makes step 4's loss NaN: the run stops there, logs a last
    (NaN) evaluation, and tests its best finite checkpoint (step 2), the same model a 2-step run tests."""
    step = optim.Optimizers.step_optimizers

    def poisoned_after_three(self):
        step(self)
        poisoned_after_three.calls += 1
        if poisoned_after_three.calls == 3:
            with torch.no_grad():
                next(p for p in self.optimizers[0].param_groups[0]["params"]).fill_(float("nan"))

    poisoned_after_three.calls = 0
    options = {"dataset": "ptb_char", "hidden_size": 8, "steps": 6, "batch": 2, "length": 8, "eval_every": 2,
               "checkpoint_every": 2, "eval_tokens": 200, "schedule": "constant"}
    monkeypatch.setattr(optim.Optimizers, "step_optimizers", poisoned_after_three)
    final = loop.run(build_config("lstm", "lm", options), tmp_path / "poisoned")
    monkeypatch.setattr(optim.Optimizers, "step_optimizers", step)
    assert final["stopped"] == "training loss not finite at step 4" and final["steps"] == 3
    logged = metrics(tmp_path / "poisoned")
    assert [m["step"] for m in logged] == [2, 3] and logged[-1]["stopped"] == final["stopped"]
    assert torch.isnan(torch.tensor([logged[-1]["train_bits"], logged[-1]["valid_bits"]])).all()
    clean = loop.run(build_config("lstm", "lm", {**options, "steps": 2}), tmp_path / "clean")
    assert final["best_step"] == 2 and final["test_bits_per_token"] == clean["test_bits_per_token"]
    assert "stopped" not in clean


def test_the_group_transformer_study_command_rebuilds_its_committed_config():
    """The one run of experiments/studies/group_transformer_shakespeare: its recorded command gives its
    config. The run predates ``map_lr`` (recorded: plain); it scales only group-RNN maps, which the
    group Transformer does not have, so today's default trains it the same way."""
    folder = Path("experiments/results/group_transformer_shakespeare")
    argv = (folder / "command.txt").read_text().split()[3:]  # after "python -m experiments.train"
    argv = argv[:argv.index("--run-dir")]
    args, rest = train.build_parser(options=False).parse_known_args(argv)
    task = args.task or "lm"  # as train.main: the default task
    built = build_config(args.model, task, train.parse_options(args.model, task, rest))
    committed = RunConfig.from_json(json.loads((folder / "config.json").read_text()))
    assert optim.map_lr_groups(build_model(built.model, device="meta"), built.train.map_lr) == []
    assert dataclasses.replace(built, train=dataclasses.replace(built.train, map_lr="plain")) == committed
