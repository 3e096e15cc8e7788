"""Scaling curves of the group RNN's training step: tokens/s against sequence length and against n,
for O(n) and U(n). ``python -m experiments.bench.scaling [--quick]``.

A recurrent model's cost per token should not grow with the length; the exponential and the state
products make it grow with n (about n³ per token). Writes ``scaling.json`` (the measured points and
the settings) and ``scaling.png`` (two panels) to ``--out`` (default ``runs/bench``; the committed
ones are in ``experiments/results/bench``).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from experiments.bench.group_rnn import training_step
from experiments.bench.timing import save_record
from experiments.cli import CommandParser
from manifold_impl.group_rnn import GroupRNN
from reference.config import GroupRNNConfig

GROUPS = ("O", "U")


def tokens_per_second(group, n, batch, length, repeats):
    """Median tokens/s of a training step (forward, backward, RiemannianAdam) after one warm-up."""
    config = GroupRNNConfig(vocab_size=65, group=group, n=n, embedding_dim=64)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 65, size=(batch, length + 1)))
    step = training_step(GroupRNN(config, generator=torch.Generator().manual_seed(0)), tokens)
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return batch * length / statistics.median(times)


def measure(quick=False):
    batch, repeats = (4, 1) if quick else (16, 3)
    lengths, sizes = ((16, 32), (4, 8)) if quick else ((32, 64, 128, 256, 512), (8, 16, 24, 32, 48))
    fixed_n, fixed_length = (4, 16) if quick else (16, 128)
    curves = {"length": {}, "n": {}}
    for group in GROUPS:
        curves["length"][group] = [{"length": length, "tokens_per_s": tokens_per_second(group, fixed_n, batch, length,
                                                                                        repeats)}
                                   for length in lengths]
        curves["n"][group] = [{"n": n, "tokens_per_s": tokens_per_second(group, n, batch, fixed_length, repeats)}
                              for n in sizes]
    return {"batch": batch, "embedding_dim": 64, "vocab_size": 65, "n_for_length_curve": fixed_n,
            "length_for_n_curve": fixed_length, "repeats": repeats, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(), "torch": torch.__version__, "curves": curves}


def plot(record, path):
    from experiments.analysis.plotting import plt

    figure, (by_length, by_n) = plt.subplots(1, 2, figsize=(10, 4))
    for group in GROUPS:
        points = record["curves"]["length"][group]
        by_length.plot([p["length"] for p in points], [p["tokens_per_s"] for p in points], "o-", label=f"{group}(n)")
        points = record["curves"]["n"][group]
        by_n.plot([p["n"] for p in points], [p["tokens_per_s"] for p in points], "o-", label=f"{group}(n)")
    by_length.set(xscale="log", yscale="log", xlabel="sequence length",
                  ylabel="training tokens/s", title=f"n = {record['n_for_length_curve']}, batch {record['batch']}")
    by_n.set(xscale="log", yscale="log", xlabel="n", ylabel="training tokens/s",
             title=f"length {record['length_for_n_curve']}, batch {record['batch']}")
    for axis in (by_length, by_n):
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None):
    parser = CommandParser("experiments.bench.scaling", __doc__)
    parser.add_argument("--quick", action="store_true", help="small shapes, one repetition (smoke test)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"),
                        help="the directory of the results (the committed ones: experiments/results/bench)")
    args = parser.parse_args(argv)
    record = measure(args.quick)
    stem = "scaling_quick" if args.quick else "scaling"
    save_record(args.out / f"{stem}.json", record)
    plot(record, args.out / f"{stem}.png")
    for axis, key in (("length", "length"), ("n", "n")):
        for group in GROUPS:
            points = ", ".join(f"{p[key]}: {p['tokens_per_s']:.0f}" for p in record["curves"][axis][group])
            print(f"{group} tokens/s by {axis}: {points}")
    print(f"saved {args.out / stem}.json and .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
