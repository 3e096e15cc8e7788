"""Train the mLSTM on noisy in-context recall (SPEC §6): ``python -m experiments.recall --key value ...``.

    python -m experiments.recall --vocab-size 80 --length 512 --read ns --steps 2000 --lr 1e-3 --seed 0

One run: AdamW (β 0.9, 0.999, weight decay 0.01) on a fresh training batch every step, drawn from
a stream seeded by ``seed``; a fixed validation set drawn from an independent stream; cosine decay
(or a constant rate, the schedule control); accuracy on the scored positions (repeated keys and
the final probe) every ``eval_every`` steps. The run directory holds ``config.json``,
``metrics.jsonl`` and ``final.json`` (and, from the command line, ``command.txt`` and
``git_revision.txt``). Runs on CUDA when ``--device cuda`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from experiments.models import build_model
from experiments.provenance import write_provenance
from experiments.tasks.nar import NoisyRecallConfig, NoisyRecallTask, accuracy
from manifold_impl.losses import cross_entropy
from manifold_impl.optim import AdamW
from reference.config import MLSTMConfig

VALIDATION_SEED_OFFSET = 1_000_003  # the validation stream's seed: seed + this (disjoint from training)


@dataclass(frozen=True)
class RecallConfig:
    """One noisy-recall training run (task, model read, optimization). Validated on creation."""

    vocab_size: int = 80
    length: int = 512
    embedding_dim: int = MLSTMConfig.embedding_dim  # the model defaults (SPEC §6)
    frac_noise: float = 0.8
    read: str = MLSTMConfig.read
    ns_steps: int = MLSTMConfig.ns_steps
    ns_coeffs: str = MLSTMConfig.ns_coeffs
    steps: int = 2000
    batch: int = 64
    lr: float = 1e-3
    schedule: str = "cosine"
    weight_decay: float = 0.01
    valid_sequences: int = 256
    eval_every: int = 100
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self):
        self.task_config()  # validates vocabulary, length and frac_noise
        self.model_config()  # validates the read
        for name in ("steps", "batch", "valid_sequences", "eval_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not self.lr > 0 or self.weight_decay < 0:
            raise ValueError("lr must be positive and weight_decay non-negative")
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(f"unknown schedule {self.schedule!r}; choose cosine or constant")

    def task_config(self):
        return NoisyRecallConfig(vocab_size=self.vocab_size, length=self.length, frac_noise=self.frac_noise)

    def model_config(self):
        return MLSTMConfig(vocab_size=self.vocab_size, embedding_dim=self.embedding_dim, read=self.read,
                           ns_steps=self.ns_steps, ns_coeffs=self.ns_coeffs)


def learning_rate_factor(config, step):
    """Cosine decay from 1 to 0 over ``steps`` (0-based step), or 1 for the constant schedule."""
    if config.schedule == "constant":
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * step / config.steps))


@torch.no_grad()
def validation_accuracy(model, inputs, targets, batch):
    """Accuracy on the scored positions of the fixed validation set, micro-averaged."""
    predictions = []
    for start in range(0, len(inputs), batch):
        logits, _ = model(inputs[start:start + batch])
        predictions.append(logits.argmax(dim=-1).cpu().numpy())
    return accuracy(np.concatenate(predictions), targets.cpu().numpy())


def train_recall(config, directory):
    """Train one run into ``directory``; returns the final record."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
    task = NoisyRecallTask(config.task_config())
    stream = np.random.default_rng(config.seed)
    valid_inputs, valid_targets = (torch.from_numpy(a).to(config.device) for a in task.sample_batch(
        np.random.default_rng(config.seed + VALIDATION_SEED_OFFSET), config.valid_sequences, evaluation=True))
    model = build_model(config.model_config(), device=config.device,
                        generator=torch.Generator().manual_seed(config.seed))
    optimizer = AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.999), weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate_factor(config, step))
    metrics, start = [], time.perf_counter()
    with open(directory / "metrics.jsonl", "w") as log:
        for step in tqdm(range(1, config.steps + 1), desc=directory.name, unit="step"):
            inputs, targets = (torch.from_numpy(a).to(config.device) for a in task.sample_batch(stream, config.batch))
            logits, _ = model(inputs)
            loss = cross_entropy(logits, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            if step % config.eval_every == 0 or step == config.steps:
                record = {"step": step, "train_loss": loss.item(),
                          "valid_accuracy": validation_accuracy(model, valid_inputs, valid_targets, config.batch)}
                log.write(json.dumps(record) + "\n")
                log.flush()
                metrics.append(record)
    final = {"valid_accuracy": metrics[-1]["valid_accuracy"], "steps": config.steps,
             "seconds": time.perf_counter() - start}
    (directory / "final.json").write_text(json.dumps(final, indent=2))
    return final


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.recall", description=__doc__.splitlines()[0])
    for field in dataclasses.fields(RecallConfig):
        kind = {"int": int, "float": float, "str": str}[str(field.type)]
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, default=field.default)
    parser.add_argument("--run-dir", type=Path, required=True)
    args = vars(parser.parse_args(argv))
    directory = args.pop("run_dir")
    config = RecallConfig(**args)
    directory.mkdir(parents=True, exist_ok=True)
    write_provenance(directory, "experiments.recall", sys.argv[1:] if argv is None else argv)
    print(json.dumps(train_recall(config, directory)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
