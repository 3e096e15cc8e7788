"""Time and peak memory of one mLSTM training step, plain read vs Newton–Schulz read (CPU).

    python -m experiments.bench.mlstm_step [--batch 16] [--length 256] [--repeats 3]

Each read runs in its own subprocess (so peak resident memory is its own), alternating, after
one warm-up step; prints the medians and the NS/plain ratios and saves them as JSON under
``experiments/results/bench/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def measure(read, batch, length, steps):
    """One subprocess's job: seconds per training step and peak RSS growth (MiB) for ``read``."""
    import numpy as np
    import torch

    from manifold_impl.losses import cross_entropy
    from manifold_impl.mlstm import MLSTM
    from manifold_impl.optim import AdamW
    from reference.config import MLSTMConfig

    model = MLSTM(MLSTMConfig(vocab_size=80, read=read), generator=torch.Generator().manual_seed(0))
    optimizer = AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 80, size=(batch, length + 1)))

    def step():
        logits, _ = model(tokens[:, :-1])
        loss = cross_entropy(logits, tokens[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"seconds": seconds, "peak_mib": (peak - before) / 1024}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.bench.mlstm_step", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="subprocesses per read, alternating")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per subprocess")
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/bench"))
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child[0], args.batch, args.length, args.steps)))
        return 0
    runs = {"plain": [], "ns": []}
    for _ in range(args.repeats):
        for read in runs:
            out = subprocess.run([sys.executable, "-m", "experiments.bench.mlstm_step", "--child", read,
                                  "--batch", str(args.batch), "--length", str(args.length), "--steps", str(args.steps)],
                                 capture_output=True, text=True, check=True)
            runs[read].append(json.loads(out.stdout.strip().splitlines()[-1]))
    summary = {read: {key: statistics.median(r[key] for r in results) for key in ("seconds", "peak_mib")}
               for read, results in runs.items()}
    import torch

    record = {
        "benchmark": "mlstm training step (forward, backward, AdamW), CPU",
        "config": {"batch": args.batch, "length": args.length, "repeats": args.repeats, "steps": args.steps,
                   "vocab": 80, "ns_steps": 5, "ns_coeffs": "cubic"},
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
                    "platform": platform.platform()},
        "runs": runs, "median": summary,
        "ratios": {"time_ns_over_plain": summary["ns"]["seconds"] / summary["plain"]["seconds"],
                   "memory_ns_over_plain": summary["ns"]["peak_mib"] / summary["plain"]["peak_mib"]},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"mlstm_step_b{args.batch}_l{args.length}.json"
    path.write_text(json.dumps(record, indent=2))
    for read, values in summary.items():
        print(f"{read:6s} {values['seconds']:.3f} s/step   peak +{values['peak_mib']:.0f} MiB")
    print(f"ratios ns/plain: time {record['ratios']['time_ns_over_plain']:.2f}, "
          f"memory {record['ratios']['memory_ns_over_plain']:.2f}   (saved {path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
