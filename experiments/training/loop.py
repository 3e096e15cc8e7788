"""One training run in its directory: ``Run`` (build, train, checkpoint, evaluate) and ``run``, which
holds the directory's lock and resumes from its checkpoint; under torchrun each process trains its
rows of the global batch and rank 0 alone writes (``distributed``). The directory's files:
experiments/README.md."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import sys
import time
from pathlib import Path

import geoopt
import numpy as np
import torch

from experiments.analysis.diagnostics import dynamics, gradient_norms
from experiments.models import build_model, checkpoint_activations
from experiments.params_budget import count_parameters
from experiments.provenance import git_revision, write_provenance
from experiments.tasks import task_class
from experiments.training import distributed
from experiments.training.config import RunConfig, check_memory, command_line, resolve_device
from experiments.training.cuda_graphs import CapturedStep
from experiments.training.optim import Optimizers, clip_and_step
from experiments.training.precision import Precision
from experiments.training.progress import Progress
from experiments.training.rundir import (CHECKPOINT_KEYS, append_line, atomic_save, atomic_write_text,
                                         check_resumable, finished_record, holding_lock, load_checkpoint_file)
from manifold_impl.group_rnn import GroupRNNCell
from manifold_impl.losses import cross_entropy

DIAGNOSTIC_BATCH = 8  # sequences in the fixed batch that the training-dynamics diagnostics read:
DIAGNOSTIC_SEED_OFFSET = 3_000_003  # drawn by the task's train_batch from seed + this offset


def compact_group_parameters(model):
    """The parameters of ``model`` that live on a compact group (the ones that can drift off it)."""
    return [p for p in model.parameters() if isinstance(p, geoopt.ManifoldParameter) and p.manifold.group.is_compact]


def group_drift(model):
    """Largest |xᴴx − I| over the compact-group-valued parameters (0 when there are none)."""
    return max((p.manifold.group.distance(p.detach()).max().item() for p in compact_group_parameters(model)),
               default=0.0)


def recorded(config):
    """What ``config.json`` holds: the RunConfig's JSON and the processes that train it (``world_size``)."""
    return {**config.to_json(), "world_size": distributed.world()[1]}


class Run:
    """One training run in a directory: build, train (resuming from its checkpoint), evaluate."""

    def __init__(self, directory, config):
        self.directory, self.config, self.train = Path(directory), config, config.train
        self.task = task_class(self.train.task)(config.task, self.train.seed)
        generator = torch.Generator().manual_seed(self.train.seed)
        self.model = build_model(config.model, device=self.train.device, dtype=getattr(torch, self.train.dtype),
                                 generator=generator)
        if self.train.checkpoint_activations:
            checkpoint_activations(self.model)
        distributed.start(self.train.device)
        self.trained = distributed.wrap(self.model)  # what the training step calls: DDP under torchrun
        self.optimizers = Optimizers(self.model, self.train, capturable=self.train.cuda_graphs)
        self.precision = Precision(self.train.precision, self.train.device)
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
        if not distributed.is_writer():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json.dumps(recorded(self.config), indent=2), self.directory / "config.json")
        write_provenance(self.directory, "experiments.train", argv)

    def save_checkpoint(self):
        if not distributed.is_writer():
            return
        atomic_save({"step": self.step, "config": json.dumps(self.config.to_json()), "model": self.model.state_dict(),
                     "optimizers": self.optimizers.state_dict(),
                     "numpy_rng": json.dumps(self.rng.bit_generator.state),
                     "torch_rng": torch.get_rng_state(), "train_seconds": self.train_seconds,
                     **({"best": self.best} if self.best else {}),
                     **({"scaler": self.precision.state_dict()} if self.precision.scaler else {})},
                    self.checkpoint_path)

    def load_checkpoint(self, state=None):
        """Continue from ``checkpoint.pt``; ``state``: its contents, if already loaded (``load_checkpoint_file``)."""
        state = load_checkpoint_file(self.checkpoint_path, CHECKPOINT_KEYS) if state is None else state
        self.model.load_state_dict(state["model"])
        self.optimizers.load_state_dict(state["optimizers"])
        self.rng.bit_generator.state = json.loads(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"].cpu())
        self.step = state["step"]
        self.train_seconds = state["train_seconds"]
        self.best = state.get("best")
        self.precision.load_state_dict(state.get("scaler"))
        if not distributed.is_writer():
            return
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
                f"{self.step + 1}–{train.steps} of batch {train.batch}, {train.device} {train.dtype}"
                + ("" if train.precision == "float32" else f", autocast {train.precision}"))

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
        """The training loss of one batch (the function ``train.compile`` compiles): the forward pass
        under ``train.precision``'s autocast, the loss in float32."""
        with self.precision.autocast():
            logits, _ = self.trained(inputs)
        return cross_entropy(logits.float(), targets.to(logits.device, non_blocking=True))

    def backward(self, inputs, targets):
        """The forward and backward pass of one training batch (ids on the host: the model checks them
        there); returns the loss, read once, after the backward pass is queued. Page-locked on CUDA,
        the batch is copied without blocking. Under torchrun this process takes its rows of the global
        batch, the gradients are averaged over the processes, and the loss is the global batch's."""
        if self.captured is not None:
            return self.captured.backward(inputs, targets)
        inputs, targets = distributed.rows(inputs), distributed.rows(targets)
        if torch.device(self.train.device).type == "cuda":
            inputs, targets = inputs.pin_memory(), targets.pin_memory()
        loss = self.training_loss(inputs, targets)
        self.optimizers.zero_grad()
        self.precision.backward(loss, self.optimizers)
        return distributed.mean_loss(loss).item()

    def update(self):
        """Clip the gradients (``train.clip``) and step the optimizers and their schedules."""
        if self.captured is not None:
            return self.captured.update()
        clip_and_step(self.model, self.optimizers, self.train.clip, self.precision.scaler)
        self.optimizers.step_schedules()

    def fit(self, deadline=None):
        """Train to ``train.steps`` (or until ``time.perf_counter()`` passes ``deadline``); tokens/s."""
        train = self.train
        start, tokens, seconds_before = time.perf_counter(), 0, self.train_seconds
        progress = Progress(self.directory.name, train.steps if deadline is None else None, self.step,
                            stream=None if distributed.is_writer() else io.StringIO(),  # rank 0 alone prints
                            selection_key=self.task.selection_key, drift=bool(compact_group_parameters(self.model)))
        progress.start(self.description())
        while self.step < train.steps and (deadline is None or time.perf_counter() < deadline):
            inputs, targets = self.task.train_batch(self.rng, train.batch, self.step)
            value = self.backward(inputs, targets)
            if not math.isfinite(value):  # diverged: no later step can recover, so stop and say so
                self.stopped = f"training loss not finite at step {self.step + 1}"
                if distributed.is_writer():  # the model of the last completed step, evaluated like any other
                    record = {"step": self.step, **self.task.train_metrics(value), **self.evaluate("valid"),
                              "drift": group_drift(self.model), **self.diagnose(), "stopped": self.stopped}
                    self._log(record)
                    self._keep_if_best(record)
                break
            evaluating = distributed.is_writer() and ((self.step + 1) % train.eval_every == 0
                                                      or self.step + 1 == train.steps)  # by rank 0 alone
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
        best-validation one if the task selects, else the last), ``best_step``, and the run's figures.
        Under torchrun rank 0 evaluates and writes, and every rank returns its record."""
        if not distributed.is_writer():
            return distributed.from_writer(None)
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
        return distributed.from_writer(result)


def run(config, directory, argv=None):
    """Train ``config`` (a RunConfig) in ``directory``, resuming from its checkpoint; returns final.json's record.

    ``device: auto`` is resolved here, on the machine that runs. ``argv``: the command recorded in
    ``command.txt`` (default: the equivalent ``experiments.train`` command line).

    One process at a time trains in a directory: it holds ``run.lock`` (``filelock``) while it runs,
    and a second is refused. A directory with a checkpoint resumes from it (``check_resumable``: its configuration may
    differ only in ``RESUME_OVERRIDES``); ``config.json`` then records the configuration resumed
    with, and ``resumes.jsonl`` one line per resume: its step, the overrides (field: [before, after]),
    the git revision and ``argv``. A run whose ``final.json`` records all of ``train.steps`` is
    returned untouched. Under torchrun rank 0 holds the lock and writes; every rank trains; a
    process that is not yet in torchrun's process group joins it for the run and leaves it after.

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
    distributed.check_training(config.train)
    joined = distributed.start(config.train.device)  # a process that trains several runs joins once, itself
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with distributed.writer_holding(holding_lock(directory)):
            return _run_locked(config, directory, argv)
    finally:
        if joined:
            distributed.stop()


def _finished(directory, final):
    """Say that the run in ``directory`` has nothing left to train; its ``final`` record, untouched."""
    further = (f"continue it with --resume {directory} --steps N, N above {final['steps']}"
               if (directory / "checkpoint.pt").exists() else "it has no checkpoint.pt to continue from")
    if distributed.is_writer():
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
        state = load_checkpoint_file(checkpoint, CHECKPOINT_KEYS)
        overrides = check_resumable(RunConfig.from_json(json.loads(state["config"])), config, state["step"], directory)
        if finished is not None and state["step"] == config.train.steps:
            return _finished(directory, finished)
        training = Run(directory, config)
        training.load_checkpoint(state)
        if distributed.is_writer():
            atomic_write_text(json.dumps(recorded(config), indent=2), directory / "config.json")
            append_line(json.dumps({"step": state["step"], "overrides": overrides, "git_revision": git_revision(),
                                    "command": command_line(config, directory) if argv is None else argv}),
                        directory / "resumes.jsonl")
    else:
        training = Run(directory, config)
        for stale in ("metrics.jsonl", "best.pt") if distributed.is_writer() else ():
            (directory / stale).unlink(missing_ok=True)  # from an attempt that died before its first checkpoint
        training.save_config(command_line(config, directory) if argv is None else argv)
    return training.finish(training.fit())
