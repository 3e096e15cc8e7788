"""Train a language model: ``python -m experiments.train --model M --dataset D [--key value ...]``.

    python -m experiments.train --model group_rnn --dataset ptb_char --group O --n 16 --steps 2000
    python -m experiments.train --resume runs/my-run
    python -m experiments.train --preset charlm-ptb/rnn-U-seed0 --steps 100   # one run of a preset

``--preset SWEEP/RUN`` takes model, dataset and options from run RUN of a sweep preset (or sweep
file; see ``experiments.sweep``); further ``--key value`` pairs override them.

Models: the keys of ``experiments.models.MODEL_CONFIGS``; datasets: the keys of ``experiments.datasets.DATASETS``. Every
``--key value`` after the two names sets a field of the model's config (``--n 16``) or of
``TrainConfig`` (``--lr 1e-3``); unknown keys are refused.

One optimizer step updates Euclidean parameters with AdamW and group-valued ones
(``geoopt.ManifoldParameter``) with RiemannianAdam, under one schedule (constant or cosine with
linear warm-up) after clipping the gradient norm. The run directory holds ``config.json`` (both
configs), ``command.txt``, ``git_revision.txt``, ``metrics.jsonl`` (one JSON object per
evaluation), ``checkpoint.pt`` (written atomically every ``checkpoint_every`` steps: model,
optimizers, schedule, step and both random generators) and ``final.json`` (test bits per token,
perplexity for word-level data, tokens/s, the measured drift of group-valued tensors). A run
killed at any point and continued with ``--resume`` produces the same metrics as an
uninterrupted one on the CPU (tested).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import geoopt
import numpy as np
import torch
from tqdm import tqdm

from experiments.datasets import DATASETS, load_dataset
from experiments.lm import bits_per_token, random_windows
from experiments.models import MODEL_CONFIGS, build_model
from experiments.provenance import write_provenance
from manifold_impl.losses import cross_entropy
from manifold_impl.optim import RiemannianAdam

SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class TrainConfig:
    """How to train (model-independent). Validated in ``__post_init__``."""

    model: str
    dataset: str
    steps: int = 1000
    batch: int = 32
    length: int = 128
    lr: float = 1e-3
    schedule: str = "cosine"
    warmup: int = 0
    weight_decay: float = 0.0
    clip: float = 1.0
    eval_every: int = 200
    eval_tokens: int = 50_000
    checkpoint_every: int = 200
    seed: int = 0
    dtype: str = "float32"
    device: str = "cpu"

    def __post_init__(self):
        if self.model not in MODEL_CONFIGS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {sorted(MODEL_CONFIGS)}")
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose one of {sorted(DATASETS)}")
        for name in ("steps", "batch", "length", "eval_every", "eval_tokens", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.warmup, int) or not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be an int in [0, steps), got {self.warmup!r}")
        if not self.lr > 0 or self.clip <= 0 or self.weight_decay < 0:
            raise ValueError("lr and clip must be positive and weight_decay non-negative")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; choose one of {list(SCHEDULES)}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")


def model_fields(name):
    """Field names and types of the model's config class (what ``--key value`` may set for it)."""
    return {f.name: f.type for f in dataclasses.fields(MODEL_CONFIGS[name]) if f.name != "vocab_size"}


def _convert(text, annotation):
    """Parse ``text`` as the dataclass field type ``annotation`` ('int', 'float', 'int | None', ...)."""
    kinds = str(annotation).replace(" ", "").split("|")
    if "None" in kinds and text.lower() == "none":
        return None
    if "bool" in kinds:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() == "true"
    for name, kind in (("int", int), ("float", float)):
        if name in kinds:
            return kind(text)
    return text


def split_overrides(model, pairs):
    """``['--n', '16', '--lr', '1e-3']`` -> (model fields, train fields), typed; unknown keys raise."""
    if len(pairs) % 2:
        raise ValueError(f"expected --key value pairs, got {pairs}")
    train_fields = {f.name: f.type for f in dataclasses.fields(TrainConfig) if f.name not in ("model", "dataset")}
    model_part, train_part = {}, {}
    for key, text in zip(pairs[::2], pairs[1::2]):
        name = key[2:].replace("-", "_") if key.startswith("--") else None
        if name in train_fields:
            train_part[name] = _convert(text, train_fields[name])
        elif name in model_fields(model):
            model_part[name] = _convert(text, model_fields(model)[name])
        else:
            raise ValueError(f"unknown option {key!r}: not a field of TrainConfig or of the {model} config "
                             f"({sorted(set(train_fields) | set(model_fields(model)))})")
    return model_part, train_part


class Optimizers:
    """AdamW on Euclidean parameters and RiemannianAdam on group-valued ones, stepped together."""

    def __init__(self, model, train):
        group_valued = [p for p in model.parameters() if isinstance(p, geoopt.ManifoldParameter)]
        euclidean = [p for p in model.parameters() if not isinstance(p, geoopt.ManifoldParameter)]
        self.optimizers = [torch.optim.AdamW(euclidean, lr=train.lr, weight_decay=train.weight_decay)]
        if group_valued:
            self.optimizers.append(RiemannianAdam(group_valued, lr=train.lr))
        self.schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda step: learning_rate_factor(train, step))
                          for o in self.optimizers]

    def step(self):
        for optimizer, schedule in zip(self.optimizers, self.schedules):
            optimizer.step()
            schedule.step()

    def zero_grad(self):
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def state_dict(self):
        return {"optimizers": [o.state_dict() for o in self.optimizers],
                "schedules": [s.state_dict() for s in self.schedules]}

    def load_state_dict(self, state):
        for optimizer, saved in zip(self.optimizers, state["optimizers"]):
            optimizer.load_state_dict(saved)
        for schedule, saved in zip(self.schedules, state["schedules"]):
            schedule.load_state_dict(saved)


def learning_rate_factor(train, step):
    """Multiplier of ``lr`` at ``step`` (0-based): linear warm-up, then constant or cosine to 0."""
    if step < train.warmup:
        return (step + 1) / train.warmup
    if train.schedule == "constant":
        return 1.0
    progress = (step - train.warmup) / max(1, train.steps - train.warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def group_drift(model):
    """Largest |xᴴx − I| over the compact-group-valued parameters (0 when there are none)."""
    drift = 0.0
    for p in model.parameters():
        if isinstance(p, geoopt.ManifoldParameter) and p.manifold.group.is_compact:
            x = p.detach()
            eye = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)
            drift = max(drift, (x.mH @ x - eye).abs().max().item())
    return drift


def atomic_save(obj, path):
    """torch.save to a temporary file in the same directory, then rename over ``path``."""
    temporary = path.with_name(path.name + ".tmp")
    torch.save(obj, temporary)
    os.replace(temporary, path)


class Run:
    """One training run in a directory: build, train (resuming if a checkpoint exists), evaluate."""

    def __init__(self, directory, train, model_part):
        self.directory, self.train, self.model_part = Path(directory), train, model_part
        dtype = getattr(torch, train.dtype)
        data = load_dataset(train.dataset)
        self.data, self.word_level = data, data.word_level
        generator = torch.Generator().manual_seed(train.seed)
        self.model_config = MODEL_CONFIGS[train.model](vocab_size=len(data.vocabulary), **model_part)
        self.model = build_model(self.model_config, device=train.device, dtype=dtype, generator=generator)
        self.optimizers = Optimizers(self.model, train)
        self.rng = np.random.default_rng(train.seed)
        self.step = 0
        self.train_seconds = 0.0  # wall time spent in fit, this process

    @property
    def checkpoint_path(self):
        return self.directory / "checkpoint.pt"

    def save_config(self, argv):
        self.directory.mkdir(parents=True, exist_ok=True)
        record = {"train": dataclasses.asdict(self.train), "model": dataclasses.asdict(self.model_config)}
        (self.directory / "config.json").write_text(json.dumps(record, indent=2))
        write_provenance(self.directory, "experiments.train", argv)

    def save_checkpoint(self):
        atomic_save({"step": self.step, "model": self.model.state_dict(),
                     "optimizers": self.optimizers.state_dict(), "numpy_rng": self.rng.bit_generator.state,
                     "torch_rng": torch.get_rng_state()}, self.checkpoint_path)

    def load_checkpoint(self):
        state = torch.load(self.checkpoint_path, weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizers.load_state_dict(state["optimizers"])
        self.rng.bit_generator.state = state["numpy_rng"]
        torch.set_rng_state(state["torch_rng"])
        self.step = state["step"]
        self._truncate_metrics()

    def _truncate_metrics(self):
        """Drop metrics written after the checkpoint (the run died between the two)."""
        path = self.directory / "metrics.jsonl"
        if path.exists():
            kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= self.step]
            path.write_text("".join(line + "\n" for line in kept))

    def _log(self, record):
        with open(self.directory / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def evaluate(self, split):
        stream = self.data.streams[split][: self.train.eval_tokens + 1]
        self.model.eval()
        bits = bits_per_token(self.model, stream, self.train.length, device=self.train.device)
        self.model.train()
        return bits

    def fit(self, deadline=None):
        """Train to ``train.steps`` (or until ``time.perf_counter()`` passes ``deadline``); tokens/s."""
        train, stream = self.train, self.data.streams["train"]
        tokens_per_step = train.batch * train.length
        start, first = time.perf_counter(), self.step
        with tqdm(total=train.steps if deadline is None else None, initial=self.step, desc=self.directory.name,
                  unit="step") as bar:
            while self.step < train.steps and (deadline is None or time.perf_counter() < deadline):
                inputs, targets = random_windows(stream, train.batch, train.length, self.rng)
                logits, _ = self.model(inputs.to(train.device))
                loss = cross_entropy(logits, targets.to(train.device))
                self.optimizers.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), train.clip)
                self.optimizers.step()
                self.step += 1
                bar.update()
                rate = (self.step - first) * tokens_per_step / (time.perf_counter() - start)
                bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{rate:.0f}")
                if self.step % train.eval_every == 0 or self.step == train.steps:
                    self._log({"step": self.step, "train_bits": loss.item() / math.log(2),
                               "valid_bits": self.evaluate("valid"), "drift": group_drift(self.model)})
                if self.step % train.checkpoint_every == 0 or self.step == train.steps:
                    self.save_checkpoint()
        self.train_seconds += time.perf_counter() - start
        return (self.step - first) * tokens_per_step / max(time.perf_counter() - start, 1e-9)

    def finish(self, tokens_per_second):
        split = "test" if "test" in self.data.streams else "valid"  # Tiny Shakespeare has no test split
        test_bits = self.evaluate(split)
        result = {"step": self.step, "test_split": split, "test_bits_per_token": test_bits,
                  "tokens_per_second": tokens_per_second, "train_seconds": self.train_seconds,
                  "parameters": sum(p.numel() * (2 if p.is_complex() else 1) for p in self.model.parameters()),
                  "drift": group_drift(self.model)}
        if self.word_level:
            result["test_perplexity"] = 2.0 ** test_bits
        (self.directory / "final.json").write_text(json.dumps(result, indent=2))
        return result


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m experiments.train", description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODEL_CONFIGS))
    parser.add_argument("--dataset", choices=sorted(DATASETS))
    parser.add_argument("--run-dir", type=Path, default=None, help="default: runs/<model>-<dataset>-seed<seed>")
    parser.add_argument("--resume", type=Path, default=None, help="continue the run in this directory")
    parser.add_argument("--preset", default=None, help="SWEEP/RUN: one training run of a sweep preset or file")
    return parser


def preset_argv(preset):
    """``--model M --dataset D --key value ...`` of run RUN in ``SWEEP/RUN`` (a preset name or a sweep file)."""
    from experiments.sweep import load_runs, resolve

    sweep, _, name = preset.rpartition("/")
    if not sweep or not name:
        raise ValueError(f"--preset takes SWEEP/RUN (for example charlm-ptb/rnn-O-seed0), got {preset!r}")
    runs = {run.name: run for run in load_runs(resolve(sweep))}
    if name not in runs:
        raise ValueError(f"no run {name!r} in {sweep}; it has: {', '.join(sorted(runs)[:8])}, ...")
    if runs[name].program != "train":
        raise ValueError(f"{preset} is a {runs[name].program} run; run it with python -m experiments.{runs[name].program}")
    return runs[name].argv("unused")[:-2]  # without --run-dir


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args, rest = build_parser().parse_known_args(argv)
    if args.preset is not None:
        if args.model or args.dataset or args.resume:
            build_parser().error("--preset replaces --model and --dataset, and cannot resume")
        argv = [*preset_argv(args.preset), *[a for a in argv if a not in ("--preset", args.preset)]]
        args, rest = build_parser().parse_known_args(argv)
    if args.resume is not None:
        saved = json.loads((args.resume / "config.json").read_text())
        model_part = {k: v for k, v in saved["model"].items() if k != "vocab_size"}
        run = Run(args.resume, TrainConfig(**saved["train"]), model_part)
        if run.checkpoint_path.exists():
            run.load_checkpoint()
    else:
        if args.model is None or args.dataset is None:
            build_parser().error("--model and --dataset are required (or --resume DIR)")
        model_part, train_part = split_overrides(args.model, rest)
        train = TrainConfig(model=args.model, dataset=args.dataset, **train_part)
        directory = args.run_dir or Path("runs") / f"{train.model}-{train.dataset}-seed{train.seed}"
        if (directory / "checkpoint.pt").exists():
            raise ValueError(f"{directory} already holds a run; continue it with --resume {directory}")
        run = Run(directory, train, model_part)
        run.save_config(argv)
    tokens_per_second = run.fit()
    result = run.finish(tokens_per_second)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
