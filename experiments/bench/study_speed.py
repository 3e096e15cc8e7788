"""Training throughput of every arm of a study sweep, measured on a quiet machine:
``python -m experiments.bench.study_speed SWEEP [--seconds 10] [--rounds 4] [--out FILE]``.

The tokens/s in a sweep's ``final.json`` are measured while the other worker trains beside it, so
they vary with that load. This builds each arm's first run as the sweep trains it (its model, task,
batch, length and optimizers: ``experiments.training.loop.Run``, one torch thread like a sweep worker) and
runs the real training loop (``Run.fit``) for ``--seconds`` per arm in turns: one warm-up turn,
then ``--rounds`` timed ones. It prints and saves (default ``<sweep's OUT>/speed.json``, with the
machine's description) the median tokens/s of each arm and its ratio to the first arm, the LSTM
in the study presets. The rate is ``TIMING_LR`` for every arm: the time of a step does not depend
on it, and a small one keeps every arm finite for the whole measurement. Never a timed test.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from experiments.bench.timing import save_record
from experiments.cli import CommandParser
from experiments.sweeps import PRESETS, load_sweep
from experiments.training.loop import Run
from experiments.training.config import build_config
from experiments.tuning import arm_templates

TIMING_LR = 1e-4
NEVER = 10**9  # steps, evaluations and checkpoints: fit runs until its deadline and writes nothing


def trainers(runs, directory):
    """``{arm: Run}``: each arm's first run of ``runs``, on the CPU, training until a deadline."""
    built = {}
    for arm, run in arm_templates(runs).items():
        options = {**run.options, "steps": NEVER, "eval_every": NEVER, "checkpoint_every": NEVER, "warmup": 0,
                   "lr": TIMING_LR, "device": "cpu"}
        built[arm] = Run(Path(directory) / arm, build_config(run.model, run.task, options))
    return built


def measure(runs, seconds=10.0, rounds=4):
    """``{arm: {"tokens_per_second": median, "rounds": [tokens/s per timed turn], "ratio_to_first"}}``."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as directory:
        built = trainers(runs, directory)
        speeds = {arm: [] for arm in built}
        for turn in range(rounds + 1):
            for arm, trainer in built.items():
                rate = trainer.fit(deadline=time.perf_counter() + seconds)
                if turn:  # the first turn warms up
                    speeds[arm].append(rate)
    first = statistics.median(next(iter(speeds.values())))
    return {arm: {"tokens_per_second": statistics.median(values), "rounds": values,
                  "ratio_to_first": statistics.median(values) / first} for arm, values in speeds.items()}


def main(argv=None):
    parser = CommandParser("experiments.bench.study_speed", __doc__)
    parser.add_argument("sweep", help=f"a sweep file or module, or a preset: {', '.join(sorted(PRESETS))}")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of training per arm and turn")
    parser.add_argument("--rounds", type=int, default=4, help="timed turns per arm, after one warm-up turn")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file (default: runs/<sweep>/speed.json)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1:
        parser.error("--seconds must be positive and --rounds at least 1")
    with parser.refusals(FileNotFoundError, ValueError):
        loaded = load_sweep(args.sweep)
    out = args.out or Path("runs") / loaded.name / "speed.json"
    speeds = measure(loaded.runs, args.seconds, args.rounds)
    for arm, speed in speeds.items():
        print(f"{arm:>20} {speed['tokens_per_second']:10,.0f} tokens/s  {speed['ratio_to_first']:.3f}× {next(iter(speeds))}")
    save_record(out, {"sweep": loaded.source, "seconds": args.seconds, "rounds": args.rounds, "lr": TIMING_LR,
                      "arms": speeds})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
