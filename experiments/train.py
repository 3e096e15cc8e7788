"""Train any model on any task, resume a run, or run one training run of a sweep preset.

Every command line, option and output file: ``main``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import geoopt
import numpy as np
import torch
from tqdm import tqdm

from experiments.analysis.diagnostics import DIAGNOSTIC_PREFIXES, dynamics, gradient_norms
from experiments.cli import OptionError, OptionParser, add_config_options, name_options, refuse, value_parser
from experiments.models import MODEL_CONFIGS, build_model
from experiments.params_budget import count_parameters
from experiments.provenance import git_revision, write_provenance
from experiments.sweeps import load_sweep
from experiments.tasks import task_class, task_classes
from experiments.training.config import (RunConfig, TrainConfig, build_config, check_memory, option_fields,
                                         recorded_config, resolve_device)
from experiments.training.cuda_graphs import CapturedStep
from experiments.training.optim import Optimizers, clip_and_step
from experiments.training.rundir import (RESUME_OVERRIDES, append_line, atomic_save, atomic_write_text,
                                         check_resumable, finished_record, holding_lock,
                                         load_checkpoint_file)
from experiments.tuning import with_chosen_rates
from manifold_impl.group_rnn import GroupRNNCell
from manifold_impl.losses import cross_entropy

USAGE = "%(prog)s (--model M [--task T] | --preset SWEEP/RUN | --resume DIR) [--option value ...] [-h]"
RUN_OPTIONS = ("model", "task", "run_dir", "resume", "preset", "params")  # the command line's options that are no config field
DIAGNOSTIC_BATCH = 8  # sequences in the fixed batch that the training-dynamics diagnostics read:
DIAGNOSTIC_SEED_OFFSET = 3_000_003  # drawn by the task's train_batch from seed + this offset


def parse_options(model, task, options):
    """``['--n', '16', '--lr=1e-3', '--no-recurrent']`` -> ``{"n": 16, "lr": 0.001, "recurrent": False}``:
    the config fields given, typed by ``build_parser(model, task)``. Raises ``cli.OptionError``
    (a ValueError) for an unknown option or a value of the wrong type, naming the option."""
    option_fields(model, task)  # refuses a field name shared by two of the configs
    namespace = build_parser(model, task).parse_args(["--model", model, "--task", task, *options])
    return {name: value for name, value in vars(namespace).items() if name not in RUN_OPTIONS}


def compact_group_parameters(model):
    """The parameters of ``model`` that live on a compact group (the ones that can drift off it)."""
    return [p for p in model.parameters() if isinstance(p, geoopt.ManifoldParameter) and p.manifold.group.is_compact]


def group_drift(model):
    """Largest |xᴴx − I| over the compact-group-valued parameters (0 when there are none)."""
    return max((p.manifold.group.distance(p.detach()).max().item() for p in compact_group_parameters(model)),
               default=0.0)


class Progress:
    """Training progress on ``stream``: a tqdm bar on a terminal (the training metrics and the last
    validation score beside it), otherwise one plain line per evaluation. Either way a first line says
    what runs (``start``), and a second, after the first step, how long the rest should take.
    ``drift``: show the group drift (false for a model without compact-group-valued parameters).
    """

    def __init__(self, name, total, initial, stream=None, selection_key=None, drift=True):
        self.name, self.total, self.stream = name, total, sys.stderr if stream is None else stream
        self.initial, self.selection_key, self.validation, self.drift = initial, selection_key, {}, drift
        self.bar = tqdm(total=total, initial=initial, desc=name, unit="step", file=self.stream) \
            if self.stream.isatty() else None

    def _line(self, text):
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def start(self, description):
        self._line(f"{self.name}: {description}")

    def step(self, step, metrics, tokens_per_second, seconds):
        """After ``step`` (1-based), with the task's training ``metrics`` and ``seconds`` since the start."""
        if step == self.initial + 1 and self.total is not None and step < self.total:
            left = self.total - step
            self._line(f"{self.name}: the first step took {seconds:.2f} s; the {left} left should take about "
                       f"{_duration(seconds * left)} (more with evaluations)")
        if self.bar is not None:
            self.bar.update()
            shown = {key: f"{value:.3f}" for key, value in {**metrics, **self.validation}.items()}
            self.bar.set_postfix(**shown, tok_s=f"{tokens_per_second:.0f}")

    def evaluation(self, record, tokens_per_second):
        if self.selection_key in record:
            self.validation = {self.selection_key: record[self.selection_key]}
        if self.bar is None:
            values = " ".join(f"{k} {v:.4g}" for k, v in record.items()
                              if k != "step" and isinstance(v, float) and not k.startswith(DIAGNOSTIC_PREFIXES)
                              and (k != "drift" or self.drift))
            total = f"/{self.total}" if self.total is not None else ""
            print(f"{self.name} step {record['step']}{total} {values} tokens/s {tokens_per_second:.0f}",
                  file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _duration(seconds):
    """``42 s``, ``3.5 min`` or ``1.2 h``."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class Run:
    """One training run in a directory: build, train (resuming from its checkpoint), evaluate."""

    def __init__(self, directory, config):
        self.directory, self.config, self.train = Path(directory), config, config.train
        self.task = task_class(self.train.task)(config.task, self.train.seed)
        generator = torch.Generator().manual_seed(self.train.seed)
        self.model = build_model(config.model, device=self.train.device, dtype=getattr(torch, self.train.dtype),
                                 generator=generator)
        self.optimizers = Optimizers(self.model, self.train, capturable=self.train.cuda_graphs)
        self.training_loss = self._compiled_loss()
        self.captured = CapturedStep(self.model, self.training_loss, self.optimizers, self.train.clip) \
            if self.train.cuda_graphs else None
        self.rng = np.random.default_rng(self.train.seed)
        self.diagnostic_batch, _ = self.task.train_batch(
            np.random.default_rng(self.train.seed + DIAGNOSTIC_SEED_OFFSET), DIAGNOSTIC_BATCH, 0)
        self.step = 0
        self.best = None  # {"step", "score", "model"}: the evaluation with the lowest selection score so far
        self.train_seconds = 0.0  # wall time spent in fit, every part of a resumed run included
        self.stopped = None  # why training ended before train.steps (a non-finite loss), if it did

    @property
    def checkpoint_path(self):
        return self.directory / "checkpoint.pt"

    @property
    def best_path(self):
        return self.directory / "best.pt"

    def save_config(self, argv):
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json.dumps(self.config.to_json(), indent=2), self.directory / "config.json")
        write_provenance(self.directory, "experiments.train", argv)

    def save_checkpoint(self):
        atomic_save({"step": self.step, "config": json.dumps(self.config.to_json()), "model": self.model.state_dict(),
                     "optimizers": self.optimizers.state_dict(),
                     "numpy_rng": json.dumps(self.rng.bit_generator.state),
                     "torch_rng": torch.get_rng_state(), "train_seconds": self.train_seconds,
                     **({"best": self.best} if self.best else {})},
                    self.checkpoint_path)

    def load_checkpoint(self, state=None):
        """Continue from ``checkpoint.pt``; ``state``: its contents, if already loaded (``load_checkpoint_file``)."""
        state = load_checkpoint_file(self.checkpoint_path) if state is None else state
        self.model.load_state_dict(state["model"])
        self.optimizers.load_state_dict(state["optimizers"])
        self.rng.bit_generator.state = json.loads(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"].cpu())
        self.step = state["step"]
        self.train_seconds = state.get("train_seconds", 0.0)  # absent from checkpoints written before it
        self.best = state.get("best")
        self._truncate_metrics()
        if self.best is not None:  # best.pt may hold an evaluation after the checkpoint
            atomic_save(self.best, self.best_path)
        else:
            self.best_path.unlink(missing_ok=True)

    def _keep_if_best(self, record):
        """Keep the model in ``best.pt`` (and in memory) if ``record`` has the lowest ``task.selection_key`` yet."""
        if self.task.selection_key is None:
            return
        score = record[self.task.selection_key]
        if not math.isfinite(score) or (self.best is not None and score >= self.best["score"]):
            return
        model = {key: value.detach().clone() for key, value in self.model.state_dict().items()}
        self.best = {"step": self.step, "score": score, "model": model}
        atomic_save(self.best, self.best_path)

    def _truncate_metrics(self):
        """Drop metrics written after the checkpoint (the run died between the two), and a torn last
        line (it died while writing one); the file is rewritten atomically.

        Raises:
            ValueError: a line other than the last is not JSON (the file was damaged, not torn).
        """
        path = self.directory / "metrics.jsonl"
        if not path.exists():
            return
        lines, kept = path.read_text().splitlines(), []
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):
                    break
                raise ValueError(f"{path}, line {number}: not a JSON record: {line[:80]!r}") from None
            if record["step"] <= self.step:
                kept.append(line)
        atomic_write_text("".join(line + "\n" for line in kept), path)

    def _log(self, record):
        append_line(json.dumps(record), self.directory / "metrics.jsonl")

    @torch.no_grad()
    def evaluate(self, split):
        """The task's metrics of the current model on ``split`` (evaluation mode, no gradients)."""
        self.model.eval()
        metrics = self.task.evaluate(self.model, split)
        self.model.train()
        return metrics

    @torch.no_grad()
    def diagnose(self):
        """The training-dynamics diagnostics on the fixed diagnostic batch (``experiments.analysis.diagnostics``)."""
        self.model.eval()
        metrics = dynamics(self.model, self.diagnostic_batch)
        self.model.train()
        return metrics

    def description(self):
        """One line of what this run trains: model, size, task, steps, batch, device and precision."""
        train, task = self.train, self.config.task
        data = f" on {task.dataset}" if getattr(task, "dataset", None) else ""
        return (f"{train.model} ({count_parameters(self.model):,} parameters), task {train.task}{data}, steps "
                f"{self.step + 1}–{train.steps} of batch {train.batch}, {train.device} {train.dtype}")

    def _compiled_loss(self):
        """``_loss``, compiled with ``train.compile`` where one is set. A group RNN's fused recurrence
        has its per-step functions compiled instead of being traced whole (``compile_steps``: the
        seconds it takes to compile do not grow with the sequence length)."""
        if self.train.compile is None:
            return self._loss
        for cell in self.model.modules():
            if isinstance(cell, GroupRNNCell) and cell.config.recurrence == "fused":
                cell.compile_steps(self.train.compile)
        return torch.compile(self._loss, backend=self.train.compile)

    def _loss(self, inputs, targets):
        """The training loss of one batch (the function ``train.compile`` compiles)."""
        logits, _ = self.model(inputs)
        return cross_entropy(logits, targets.to(logits.device, non_blocking=True))

    def backward(self, inputs, targets):
        """The forward and backward pass of one training batch (ids on the host: the model checks them
        there); returns the loss, read once, after the backward pass is queued. Page-locked on CUDA,
        the batch is copied without blocking."""
        if self.captured is not None:
            return self.captured.backward(inputs, targets)
        if torch.device(self.train.device).type == "cuda":
            inputs, targets = inputs.pin_memory(), targets.pin_memory()
        loss = self.training_loss(inputs, targets)
        self.optimizers.zero_grad()
        loss.backward()
        return loss.item()

    def update(self):
        """Clip the gradients (``train.clip``) and step the optimizers and their schedules."""
        if self.captured is not None:
            return self.captured.update()
        clip_and_step(self.model, self.optimizers, self.train.clip)
        self.optimizers.step_schedules()

    def fit(self, deadline=None):
        """Train to ``train.steps`` (or until ``time.perf_counter()`` passes ``deadline``); tokens/s."""
        train = self.train
        start, tokens, seconds_before = time.perf_counter(), 0, self.train_seconds
        progress = Progress(self.directory.name, train.steps if deadline is None else None, self.step,
                            selection_key=self.task.selection_key, drift=bool(compact_group_parameters(self.model)))
        progress.start(self.description())
        while self.step < train.steps and (deadline is None or time.perf_counter() < deadline):
            inputs, targets = self.task.train_batch(self.rng, train.batch, self.step)
            value = self.backward(inputs, targets)
            if not math.isfinite(value):  # diverged: no later step can recover, so stop and say so
                self.stopped = f"training loss not finite at step {self.step + 1}"
                record = {"step": self.step, **self.task.train_metrics(value), **self.evaluate("valid"),
                          "drift": group_drift(self.model), **self.diagnose(), "stopped": self.stopped}
                self._log(record)  # the model of the last completed step, evaluated like any other
                self._keep_if_best(record)
                break
            evaluating = (self.step + 1) % train.eval_every == 0 or self.step + 1 == train.steps
            gradients = gradient_norms(self.model) if evaluating else {}  # before clipping
            self.update()
            self.step += 1
            tokens += inputs.numel()
            elapsed = time.perf_counter() - start
            self.train_seconds = seconds_before + elapsed  # what a checkpoint now records
            rate = tokens / elapsed
            progress.step(self.step, self.task.train_metrics(value), rate, elapsed)
            if evaluating:
                record = {"step": self.step, **self.task.train_metrics(value), **self.evaluate("valid"),
                          "drift": group_drift(self.model), **gradients, **self.diagnose()}
                self._log(record)
                self._keep_if_best(record)
                progress.evaluation(record, rate)
            if self.step % train.checkpoint_every == 0 or self.step == train.steps:
                self.save_checkpoint()
        progress.close()
        self.train_seconds = seconds_before + time.perf_counter() - start
        return tokens / max(time.perf_counter() - start, 1e-9)

    def finish(self, tokens_per_second):
        """Write and return ``final.json``: the task's validation and test metrics of the kept model (the
        best-validation one if the task selects, else the last), ``best_step``, and the run's figures."""
        if self.best is not None:
            self.model.load_state_dict(self.best["model"])
        best_step = self.best["step"] if self.best else (None if self.task.selection_key else self.step)
        final = self.directory / "final.json"
        timing = {"tokens_per_second": tokens_per_second, "train_seconds": self.train_seconds}
        result = {"steps": self.step, "best_step": best_step,
                  **self.evaluate("valid"), **self.evaluate("test"), **timing,
                  "parameters": count_parameters(self.model), "drift": group_drift(self.model),
                  **({"stopped": self.stopped} if self.stopped else {})}
        atomic_write_text(json.dumps(result, indent=2), final)
        return result


def run(config, directory, argv=None):
    """Train ``config`` (a RunConfig) in ``directory``, resuming from its checkpoint; returns final.json's record.

    ``device: auto`` is resolved here, on the machine that runs. ``argv``: the command recorded in
    ``command.txt`` (default: the equivalent ``experiments.train`` command line).

    One process at a time trains in a directory: it holds ``run.lock`` (``filelock``) while it runs,
    and a second is refused. A directory with a checkpoint resumes from it (``check_resumable``: its configuration may
    differ only in ``RESUME_OVERRIDES``); ``config.json`` then records the configuration resumed
    with, and ``resumes.jsonl`` one line per resume: its step, the overrides (field: [before, after]),
    the git revision and ``argv``. A run whose ``final.json`` records all of ``train.steps`` is
    returned untouched.

    Raises:
        ValueError: ``directory`` holds a checkpoint of a different configuration, or a finished run
            without a checkpoint to take further, another
            process is training in it, or a step would need more memory than the device has
            (``check_memory``).
    """
    directory = Path(directory)
    config = dataclasses.replace(config, train=dataclasses.replace(
        config.train, device=resolve_device(config.train.device)))
    check_memory(config)
    directory.mkdir(parents=True, exist_ok=True)
    with holding_lock(directory):
        return _run_locked(config, directory, argv)


def _finished(directory, final):
    """Say that the run in ``directory`` has nothing left to train; its ``final`` record, untouched."""
    further = (f"continue it with --resume {directory} --steps N, N above {final['steps']}"
               if (directory / "checkpoint.pt").exists() else "it has no checkpoint.pt to continue from")
    print(f"{directory} finished at step {final['steps']} (final.json): nothing to train; {further}",
          file=sys.stderr, flush=True)
    return final


def _run_locked(config, directory, argv):
    """``run`` once the directory's lock is held. A run that finished its steps is left as it is."""
    checkpoint = directory / "checkpoint.pt"
    finished = finished_record(directory, config.train.steps)
    if not checkpoint.exists() and (directory / "final.json").exists():
        if finished is not None:
            return _finished(directory, finished)
        raise ValueError(f"cannot continue {directory} to step {config.train.steps}: it holds a finished run "
                         "without checkpoint.pt (trained without checkpoints, or the file was deleted)")
    if checkpoint.exists():
        state = load_checkpoint_file(checkpoint)
        recorded = json.loads(state["config"]) if "config" in state else \
            json.loads((directory / "config.json").read_text())  # a checkpoint written before it held its config
        overrides = check_resumable(RunConfig.from_json(recorded), config, state["step"], directory)
        if finished is not None and state["step"] == config.train.steps:
            return _finished(directory, finished)
        training = Run(directory, config)
        training.load_checkpoint(state)
        atomic_write_text(json.dumps(config.to_json(), indent=2), directory / "config.json")
        append_line(json.dumps({"step": state["step"], "overrides": overrides, "git_revision": git_revision(),
                                "command": command_line(config, directory) if argv is None else argv}),
                    directory / "resumes.jsonl")
    else:
        training = Run(directory, config)
        for stale in ("metrics.jsonl", "best.pt"):  # from an attempt that died before its first checkpoint
            (directory / stale).unlink(missing_ok=True)
        training.save_config(command_line(config, directory) if argv is None else argv)
    return training.finish(training.fit())


def command_line(config, directory):
    """The ``experiments.train`` arguments that rebuild ``config``: model, task and every non-default field."""
    argv = ["--model", config.train.model, "--task", config.train.task]
    for part in (config.train, config.task, config.model):
        for field in dataclasses.fields(part):
            value = getattr(part, field.name)
            if field.name not in ("model", "task", "vocab_size") and value != field.default:
                argv += [f"--{field.name.replace('_', '-')}", str(value)]
    return [*argv, "--run-dir", str(directory)]


def build_parser(model=None, task=None, options=True):
    """The command line of ``python -m experiments.train``: the run's own options and, unless
    ``options`` is false, every field of ``TrainConfig``, of ``task``'s config (default ``lm``) and
    of ``model``'s config (without a model, its options are listed by ``--model M --help``)."""
    task = task or "lm"
    parser = OptionParser(prog="python -m experiments.train", description=__doc__.split("\n\n")[0], usage=USAGE,
                          add_help=options, epilog=None if model or not options else
                          f"Each model adds the options of its config: --model M --help lists them "
                          f"(M one of {', '.join(MODEL_CONFIGS)}); --task T --help lists task T's.")
    run_options = parser.add_argument_group("run")
    run_options.add_argument("--model", choices=sorted(MODEL_CONFIGS), help="the model to train")
    run_options.add_argument("--task", default=None, choices=sorted(task_classes()), help="the task (default: lm)")
    run_options.add_argument("--run-dir", type=Path, default=None, help="the run directory (default: "
                             "runs/<model>-<task>-seed<seed>, or runs/<SWEEP>/<RUN> for --preset SWEEP/RUN)")
    run_options.add_argument("--resume", type=Path, default=None, help="continue the run in this directory")
    run_options.add_argument("--preset", default=None, help="SWEEP/RUN: one training run of a sweep preset or file")
    run_options.add_argument("--params", type=value_parser(int), default=None,
                             help="size the model to this many parameters (±2%%; its free size fields, "
                                  "experiments.params_budget.SEARCHABLE, that no option fixes)")
    if options:
        add_config_options(parser, TrainConfig, "training (TrainConfig)", excluded=("model", "task"))
        task_config = task_class(task).Config
        add_config_options(parser, task_config, f"task {task} ({task_config.__name__})")
        if model is not None:
            model_config = MODEL_CONFIGS[model]
            add_config_options(parser, model_config, f"model {model} ({model_config.__name__})",
                               excluded=("vocab_size",))
    return parser


def preset_parts(preset):
    """``SWEEP/RUN`` -> ``(SWEEP, RUN)``; a ValueError for any other form."""
    sweep, _, name = preset.rpartition("/")
    if not sweep or not name:
        raise ValueError(f"--preset takes SWEEP/RUN (for example charlm-ptb/rnn-O-seed0), got {preset!r}")
    return sweep, name


def preset_run_dir(preset):
    """The default directory of a preset run: ``runs/<SWEEP>/<RUN>`` (a sweep file by its stem)."""
    sweep, name = preset_parts(preset)
    return Path("runs") / (Path(sweep).stem if sweep.endswith(".py") else sweep) / name


def preset_argv(preset):
    """``--model M --task T --key value ...`` of run RUN in ``SWEEP/RUN`` (a preset, module or sweep file).

    A sweep that tunes its rates (``TUNING``) and has chosen them (``chosen_rates.json`` in its ``OUT``)
    gives the run its arm's chosen rate, as the sweep trained it; before the choice, the placeholder."""
    sweep, name = preset_parts(preset)
    loaded = load_sweep(sweep)
    runs = {run.name: run for run in loaded.runs}
    if name not in runs:
        raise ValueError(f"no run {name!r} in {sweep}; it has: {', '.join(sorted(runs)[:8])}, ...")
    run = runs[name]
    chosen = None if loaded.tuning is None or loaded.out is None else Path(loaded.out) / "chosen_rates.json"
    if chosen is not None and chosen.exists():
        tuned, _ = with_chosen_rates([run], json.loads(chosen.read_text()))  # empty where the arm has no rate yet
        run = tuned[0] if tuned else run
    return run.argv()


def resume_config(directory, pairs):
    """The RunConfig in ``directory/config.json`` with ``pairs`` (``--steps 2000 ...``) applied.

    Raises:
        ValueError: ``directory`` has no ``config.json``; an option that is unknown or that a
            resume may not change (not in ``RESUME_OVERRIDES``).
    """
    if not (Path(directory) / "config.json").exists():
        raise ValueError(f"cannot resume {directory}: it has no config.json")
    config = recorded_config(directory)
    options = parse_options(config.train.model, config.train.task, pairs)
    allowed = ", ".join("--" + n.replace("_", "-") for n in RESUME_OVERRIDES)
    for name in options:
        if name not in RESUME_OVERRIDES:
            known = name in option_fields(config.train.model, config.train.task)
            raise ValueError(f"{'a resume cannot change' if known else 'unknown option'} '--{name.replace('_', '-')}'"
                             f" (a resume may change only {allowed})")
    return dataclasses.replace(config, train=dataclasses.replace(config.train, **options))


def main(argv=None, prog=None):
    """Train, resume or run a preset from the command line (``python -m experiments.train --help``).

    python -m experiments.train --model group_rnn --dataset ptb_char --group O --n 16 --steps 2000
        python -m experiments.train --model mlstm --task recall --vocab-size 48 --length 64 --read ns
        python -m experiments.train --resume runs/my-run [--steps 4000]
        python -m experiments.train --preset charlm-ptb/rnn-U-seed0 --steps 100   # one run of a preset

    Models: the keys of ``experiments.models.MODEL_CONFIGS``; tasks: ``experiments.tasks.task_classes()``
    (``lm``, the default, language modelling on ``--dataset``; ``recall``, noisy in-context recall).
    Every ``--key value`` (or ``--key=value``; ``--flag``/``--no-flag`` for booleans; ``1e3`` for
    integers) sets a field of ``TrainConfig`` (``--lr 1e-3``), of the task's config
    (``--dataset ptb_char``, ``--length 64``) or of the model's config (``--n 16``); the three share no
    field name, and ``--model M [--task T] --help`` lists them all (``build_parser``). ``--params N``
    sizes the model to N parameters (``sized_model``; the sizes it chose are in ``config.json``). Every refusal of
    the command line comes before any work, as one argparse-style line (``prog``: the command it names,
    for a wrapper's own) and exit code 2. ``--preset SWEEP/RUN`` takes model, task and options
    from run RUN of a sweep (``experiments.sweeps``), at its arm's chosen rate where the sweep has
    chosen one (``preset_argv``); further pairs override them.

    One loop for every task: AdamW on Euclidean parameters and RiemannianAdam on group-valued ones
    (``geoopt.ManifoldParameter``), a group RNN's input and state maps at their n-aware rates unless
    ``--map-lr plain`` (``map_lr_groups``), one schedule (linear warm-up, then constant or cosine to 0), the
    gradient norm clipped to ``clip`` (``none``: not clipped), an evaluation of the task's validation
    split every ``eval_every`` steps. The run directory holds ``config.json`` (training, task and model
    configs), ``command.txt``, ``git_revision.txt``, ``metrics.jsonl`` (one JSON object per
    evaluation: the task's training and validation metrics, the drift, the gradient norm of each
    parameter group before clipping at that step, and for a group RNN its training dynamics on one
    fixed batch; see ``experiments.analysis.diagnostics``), ``checkpoint.pt`` (written atomically every
    ``checkpoint_every`` steps: model, optimizers, schedule, step, both random generators and the best
    model so far, as tensors and JSON: it is loaded with ``weights_only=True``, so a checkpoint that
    carries a pickled object is refused), ``best.pt`` (the model at the evaluation with the lowest
    ``task.selection_key``, for language modelling the validation bits, with its step and score)
    and ``final.json`` (the task's validation and test metrics of that best model, or of the last
    one for a task that does not select, ``best_step``, tokens/s, parameters, the drift of
    group-valued tensors). A training loss that is not finite ends the run: the model of the last
    completed step is evaluated like any other (into ``metrics.jsonl``, and kept if it is the best), and
    ``final.json`` says why under ``stopped`` (``steps``: the steps completed; with no finite
    evaluation ``best_step`` is null and the last model is tested).
    A run killed at any point and continued with ``--resume`` produces the same metrics and
    parameters as an uninterrupted one, bit for bit, on the CPU (tested). The checkpoint holds the
    run's configuration; a resume refuses any other (an edited ``config.json`` included), except for
    ``RESUME_OVERRIDES`` given after ``--resume DIR`` (``--steps`` at least the checkpoint's step),
    which ``config.json`` and ``resumes.jsonl`` record. A resume changes nothing where it cannot
    continue: a directory without ``checkpoint.pt`` is refused, and a run that finished its steps
    is left as it is (exit 0; ``--steps N`` above them continues it). One process at a time trains in a directory (it
    holds ``run.lock``); every file but the appended ``*.jsonl`` is written to a temporary file and
    renamed over, and a failed write (a full disk) is an ``OSError`` naming the file and leaves no
    temporary file behind. Progress goes to stderr: a bar on a terminal, otherwise one
    plain line per evaluation.
    """
    argv = sys.argv[1:] if argv is None else argv
    try:
        config, directory, argv = configure(argv)
    except (ValueError, TypeError, OSError) as error:  # every refusal, before any work (missing data included)
        parser = build_parser(options=False)
        parser.prog = prog or parser.prog
        refuse(parser, error)
    print(json.dumps(run(config, directory, argv)))
    return 0


def configure(argv):
    """``(config, directory, argv to record)`` of a command line (``main``); ``--help`` exits here.

    Raises:
        ValueError: an unknown option, a value of the wrong type or one a config refuses (led by
            the options it names, ``cli.name_options``), a directory that holds a run already.
    """
    args, rest = build_parser(options=False).parse_known_args(argv)
    default_directory = None
    if args.preset is not None:
        if args.model or args.resume:
            raise OptionError("--preset replaces --model and --task, and cannot resume")
        argv = [*preset_argv(args.preset), *rest, *([] if args.task is None else ["--task", args.task]),
                *([] if args.run_dir is None else ["--run-dir", str(args.run_dir)]),
                *([] if args.params is None else ["--params", str(args.params)])]
        default_directory = preset_run_dir(args.preset)
        args, rest = build_parser(options=False).parse_known_args(argv)
    if args.resume is not None:
        if args.model or args.task or args.run_dir or args.params:
            raise OptionError("--resume DIR takes the run's model, task, size and directory from DIR")
        if "-h" in rest or "--help" in rest:
            saved = recorded_config(args.resume)
            build_parser(saved.train.model, saved.train.task).parse_args(["--help"])
        directory = args.resume
        config = resume_config(directory, rest)
        if not (directory / "checkpoint.pt").exists() and finished_record(directory, config.train.steps) is None:
            raise OptionError(f"cannot resume {directory}: it has no checkpoint.pt to continue from"
                              + ("" if not (directory / "final.json").exists() else
                                 f" past the step its final.json records; train {config.train.steps} steps "
                                 "in another --run-dir"))
        return config, directory, argv
    task = args.task or "lm"
    if args.model is None:
        if "-h" in rest or "--help" in rest:
            build_parser(task=task).parse_args(["--help"])
        raise OptionError("--model is required (or --resume DIR, or --preset SWEEP/RUN)")
    options = parse_options(args.model, task, rest)
    try:
        config = build_config(args.model, task, options, args.params)
    except (ValueError, TypeError) as error:
        raise OptionError(name_options(str(error), options)) from error
    check_memory(config)
    directory = args.run_dir or default_directory or Path("runs") / f"{args.model}-{task}-seed{config.train.seed}"
    if (directory / "checkpoint.pt").exists() or (directory / "final.json").exists():
        raise OptionError(f"{directory} already holds a run; continue it with --resume {directory}, or choose "
                          "another directory with --run-dir")
    return config, directory, argv


if __name__ == "__main__":
    raise SystemExit(main())
