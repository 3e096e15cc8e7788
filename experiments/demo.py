"""``make demo``: the O(n) group-state RNN against a parameter-matched LSTM on Penn Treebank characters.

Times a few steps of the group RNN, gives it as many steps as fit in most of the time budget
(default 5 minutes in all, CPU), then trains the LSTM for the same number of steps on the same
batches (it is several times faster). Both are ordinary runs of ``experiments.train`` in
``runs/demo/group_rnn`` and ``runs/demo/lstm`` (checkpoints, ``final.json``: ``--resume`` and
``experiments.report runs/demo`` take them). Prints their validation bits per character side by side
with parameter counts and tokens/s, writes the curves (``runs/demo/curves.png``) and a JSON summary,
and runs the parity check for the trained group-RNN configuration.

    python -m experiments.demo [--minutes 5] [--n 16] [--seed 0]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
from pathlib import Path

import numpy as np

from experiments.analysis.plotting import plt
from experiments.baselines import LSTMConfig
from experiments.cli import CommandParser
from experiments.params_budget import parameter_count, size_to_budget
from experiments.training.loop import Run, run
from experiments.training.config import build_config
from parity_tests.harness import parity as group_rnn_parity
from reference.config import GroupRNNConfig

log = logging.getLogger("groupstate.demo")
VOCABULARY = 50  # Penn Treebank characters


def parse_args(argv=None):
    parser = CommandParser("experiments.demo", __doc__)
    parser.add_argument("--minutes", type=float, default=5.0, help="about the total time; the group RNN gets 80%%")
    parser.add_argument("--n", type=int, default=16, help="the O(n) state size")
    parser.add_argument("--lr", type=float, default=1e-3, help="the learning rate of both models")
    parser.add_argument("--seed", type=int, default=0, help="seeds both runs")
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="the directory of both runs")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    return args


EVAL_EVERY = 200
TIMED_STEPS = 5  # timed after one untimed step, to size the group RNN's run to its minutes


def demo_config(name, config, args, steps):
    """The RunConfig of one demo run: ``config``'s model at ``steps`` steps of batch 32 × 64."""
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k != "vocab_size"}
    return build_config(name, "lm", {"dataset": "ptb_char", "steps": steps, "batch": 32, "length": 64,
                                     "lr": args.lr, "schedule": "constant", "eval_every": EVAL_EVERY,
                                     "eval_tokens": 40_000, "checkpoint_every": EVAL_EVERY, "seed": args.seed,
                                     **fields})


def untrained_and_steps(config, directory, seconds=None):
    """The untrained model's validation bits and, given ``seconds``, how many steps of ``config``
    (evaluations and the final validation and test included) fit in them: timed on a copy of the
    run built in memory (the same seed, so the same untrained model), nothing written."""
    start = time.perf_counter()
    probe = Run(directory, config)
    evaluation = time.perf_counter()
    untrained = probe.evaluate("valid")["valid_bits"]
    if seconds is None:
        return untrained, None
    evaluation = time.perf_counter() - evaluation
    rng = np.random.default_rng(config.train.seed)
    for index in range(TIMED_STEPS + 1):
        if index == 1:
            timed = time.perf_counter()
        probe.backward(*probe.task.train_batch(rng, config.train.batch, index))
        probe.update()
    step = (time.perf_counter() - timed) / TIMED_STEPS
    left = seconds - (time.perf_counter() - start) - 2 * evaluation
    return untrained, max(1, int(left / (step + evaluation / EVAL_EVERY)))


def train_for(name, config, args, minutes=None, steps=None):
    """Train one model as a run in ``args.out/name`` for ``steps``, or as many as fit in ``minutes``;
    its summary."""
    directory = args.out / name
    shutil.rmtree(directory, ignore_errors=True)  # the demo starts from scratch every time
    untrained, fitting = untrained_and_steps(demo_config(name, config, args, 1), directory,
                                             None if minutes is None else 60 * minutes)
    final = run(demo_config(name, config, args, steps or fitting), directory)
    curve = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    return {"model": name, "parameters": final["parameters"], "steps": final["steps"],
            "tokens_per_second": final["tokens_per_second"], "valid_bpc_untrained": untrained,
            "valid_bpc": final["valid_bits"], "curve": curve, "config": dataclasses.asdict(config)}


def plot(results, path):
    figure, axis = plt.subplots(figsize=(6, 4))
    for result in results:
        steps = [0] + [point["step"] for point in result["curve"]]
        bits = [result["valid_bpc_untrained"]] + [point["valid_bits"] for point in result["curve"]]
        axis.plot(steps, bits, marker=".", label=f"{result['model']} ({result['parameters']:,} parameters)")
    axis.axhline(math.log2(VOCABULARY), color="grey", linestyle=":", label="uniform")
    axis.set_xlabel("training step (batch 32 × 64 characters)")
    axis.set_ylabel("validation bits per character")
    axis.set_title("Penn Treebank characters")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    group_rnn = GroupRNNConfig(vocab_size=VOCABULARY, group="O", n=args.n, embedding_dim=32)
    lstm = size_to_budget(LSTMConfig(vocab_size=VOCABULARY, hidden_size=1), parameter_count(group_rnn))
    log.info("O(%d) group RNN: %d parameters; LSTM (hidden %d, embedding %d): %d parameters", args.n,
             parameter_count(group_rnn), lstm.hidden_size, lstm.embedding_dim or lstm.hidden_size,
             parameter_count(lstm))
    first = train_for("group_rnn", group_rnn, args, minutes=0.8 * args.minutes)
    results = [first, train_for("lstm", lstm, args, steps=first["steps"])]

    log.info("\n%-10s %11s %16s %10s %8s %10s", "model", "parameters", "valid bpc before", "after", "steps",
             "tokens/s")
    for r in results:
        log.info("%-10s %11d %16.3f %10.3f %8d %10.0f", r["model"], r["parameters"], r["valid_bpc_untrained"],
                 r["valid_bpc"], r["steps"], r["tokens_per_second"])
    plot(results, args.out / "curves.png")
    parity = group_rnn_parity(group_rnn, seed=args.seed, dtype="float32")
    log.info("parity check of the group-RNN configuration (torch float32 vs the reference): %s",
             "pass" if parity["pass"] else "FAIL")
    summary = {"results": results, "parity_pass": parity["pass"], "args": {k: str(v) for k, v in vars(args).items()}}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    log.info("curves: %s, summary: %s", args.out / "curves.png", args.out / "summary.json")
    return 0 if parity["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
