"""Why no arm learns A5 or S5 in 300 steps: four arms of the ``state-tracking`` preset trained for
``STEPS`` steps, on short S5 words (≤ ``SHORT_LENGTH``) and with a slow curriculum
(``CURRICULUM_STEPS``), then the accuracy at each position of ``WORDS`` fresh words of length 64.

    python -m experiments.studies.state_tracking.words_probe [--out experiments/results/state_tracking/words_probe]

Writes ``words_probe.json`` and ``words_probe.png`` into OUT; the runs go to OUT/<cell>-<arm>/
and are resumable. Single-threaded, 1–3 minutes per run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from experiments.analysis.plotting import plt
from experiments.cli import CommandParser
from experiments.studies.state_tracking.arms import WARMUP
from experiments.sweep_run import option_argv
from experiments.tasks.base import split_generator
from experiments.tasks.words import permutation_group, word_batch
from experiments.train import main as train_main
from experiments.training.config import load_run_model

CELLS = ("S5", "A5")
ARMS = ("rnn-SO-input-spread", "rnn-SO-input", "rnn-U-input", "lstm")
SHORT_ARMS = ("rnn-SO-input-spread", "lstm")  # also trained on S5 words of length ≤ SHORT_LENGTH only
SHORT_LENGTH = 4
CURRICULUM_STEPS = 2500  # the long-curriculum runs: the longest word grows from 2 to 64 over these steps
A5_CURRICULUM_EXTRA = (("rnn-SO-input-spread", 1), ("rnn-SO-input-spread", 2), ("rnn-SO-input", 0),
                       ("rnn-U-input", 0))
S5_CURRICULUM_EXTRA = (("rnn-SO-input", 0), ("rnn-U-input", 0))
STEPS = 3000
EVAL_EVERY = 500
CHECKPOINT_EVERY = 1000
WORDS, LENGTH = 256, 64


def probe_runs(cells=CELLS, arms=ARMS, short_arms=SHORT_ARMS):
    """``{run name: (preset run, extra options)}``: every (cell, arm), and the short-word runs on S5."""
    runs = {f"{cell}-{arm}": (f"{cell}-{arm}-seed0", {}) for cell in cells for arm in arms}
    runs.update({f"S5-{arm}-max{SHORT_LENGTH}": (f"S5-{arm}-seed0", {"train_max_length": SHORT_LENGTH})
                 for arm in short_arms})
    curriculum = {"train_min_length": 2, "curriculum_steps": CURRICULUM_STEPS}
    runs.update({f"{cell}-{arm}-curriculum{CURRICULUM_STEPS}": (f"{cell}-{arm}-seed0", curriculum)
                 for cell in cells for arm in short_arms})
    for cell, extra in (("A5", A5_CURRICULUM_EXTRA), ("S5", S5_CURRICULUM_EXTRA)):  # what solved A5, more seeds/arms
        if cell in cells:
            runs.update({f"{cell}-{arm}-curriculum{CURRICULUM_STEPS}-seed{seed}":
                         (f"{cell}-{arm}-seed{seed}", curriculum) for arm, seed in extra})
    return runs


def train(out, runs=None, steps=STEPS, eval_every=EVAL_EVERY):
    """Train every run of ``runs`` (default ``probe_runs()``) not finished under ``out``: the preset's
    seed-0 run at ``steps``, its warm-up min(``WARMUP``, steps/10) as the preset's. A finished run
    without its checkpoint (a fresh clone: checkpoints are not committed) is trained again, which
    reproduces it on one thread (``main`` sets it)."""
    for name, (preset, extra) in (probe_runs() if runs is None else runs).items():
        directory = out / name
        if (directory / "final.json").exists() and (directory / "checkpoint.pt").exists():
            continue
        if (directory / "final.json").exists():  # a committed run (checkpoints are not committed): train it again
            shutil.rmtree(directory)
        if (directory / "checkpoint.pt").exists():
            train_main(["--resume", str(directory)])
            continue
        options = {"steps": steps, "eval_every": eval_every, "checkpoint_every": min(CHECKPOINT_EVERY, steps),
                   "warmup": min(WARMUP, steps // 10), **extra}
        train_main(["--preset", f"state-tracking/{preset}", *option_argv(options), "--run-dir", str(directory)])


@torch.no_grad()
def accuracy_by_position(directory, words=WORDS, length=LENGTH):
    """``[length]`` accuracy at each position of ``words`` test words, for the model of a finished run."""
    config, model = load_run_model(directory, "checkpoint.pt")
    group = permutation_group(config.task.word_group)
    inputs, targets = word_batch(group, split_generator(config.train.seed, "test"), words, length)
    logits, _ = model(torch.from_numpy(inputs))
    return (logits.argmax(-1).numpy() == targets).mean(axis=0)


def analyse(out, runs=None, words=WORDS, length=LENGTH):
    """``{run: {"curve": [[step, train_loss]], "accuracy": [length]}}`` of the finished runs of ``runs``
    (default ``probe_runs()``); writes JSON and PNG."""
    result = {}
    for name in (probe_runs() if runs is None else runs):
        directory = out / name
        if not (directory / "final.json").exists():
            continue
        lines = (directory / "metrics.jsonl").read_text().splitlines()
        curve = [[r["step"], r["train_loss"]] for r in map(json.loads, lines)]
        result[name] = {"curve": curve, "accuracy": accuracy_by_position(directory, words, length).tolist()}
    (out / "words_probe.json").write_text(json.dumps({"words": words, "length": length, "runs": result}, indent=1))
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, record in result.items():
        steps, losses = zip(*record["curve"])
        axes[0].plot(steps, losses, marker="o", label=name)
        axes[1].plot(np.arange(1, length + 1), record["accuracy"], label=name)
    for cell, order in (("S5", 120), ("A5", 60)):
        axes[0].axhline(np.log(order), color="gray", lw=0.6, ls=":")
        axes[1].axhline(1 / order, color="gray", lw=0.6, ls=":")
    axes[0].set(xlabel="step", ylabel="training loss (nats)", title="training loss; dotted: ln |G|")
    axes[1].set(xlabel="position t in the word", ylabel="test accuracy", xscale="log", yscale="log",
                title="accuracy by position; dotted: 1/|G|")
    axes[1].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out / "words_probe.png", dpi=120)
    return result


def main(argv=None):
    parser = CommandParser("experiments.studies.state_tracking.words_probe", __doc__)
    parser.add_argument("--out", type=Path, default=Path("runs/state_tracking/words_probe"),
                        help="the directory of the runs and the figure (the committed ones: "
                             "experiments/results/state_tracking/words_probe)")
    parser.add_argument("--steps", type=int, default=STEPS, help="training steps of each run")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    train(args.out, steps=args.steps, eval_every=min(EVAL_EVERY, args.steps))
    for name, record in analyse(args.out).items():
        accuracy = record["accuracy"]
        print(f"{name:28} final train loss {record['curve'][-1][1]:.3f}  accuracy at t = 1, 2, 3, 8, 64: "
              + ", ".join(f"{accuracy[t - 1]:.3f}" for t in (1, 2, 3, 8, 64)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
