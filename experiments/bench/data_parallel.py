"""``python -m experiments.bench.data_parallel``: training tokens/s of 2 data-parallel ranks against 1
process on the same cores, for the same global batch.

The same ``experiments.train`` run (a group RNN O(16) and the LSTM on Tiny Shakespeare, batch
32 × 128) trained three ways, one after the other: one process with torch's threads (all the
cores), one process with one thread, and ``torchrun --nproc_per_node=2`` with one thread per rank
(gloo). Each row is the 2-rank run's ``final.json`` tokens/s (global tokens) over a 1-process run's.
On a 2-core CPU the ranks share the cores a single process already uses, so the ratio against
torch's threads says what data parallelism costs or gains there, not how it scales on separate
devices. Saves ``--out``/``data_parallel.json`` (``_quick`` with ``--quick``: 4 steps of 8 × 16).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.bench.timing import row, save_record
from experiments.cli import CommandParser
from experiments.training.launch import ROOT, child_environment, torchrun_command
from experiments.sweep_run import option_argv

MODELS = {"group RNN O(16)": ("group_rnn", {"group": "O", "n": 16, "embedding_dim": 64}),
          "LSTM": ("lstm", {"hidden_size": 96})}


def tokens_per_second(model, options, directory, processes, threads):
    """The ``tokens_per_second`` of ``final.json`` of one run trained by ``processes`` processes with
    ``threads`` torch threads each (None: torch's default)."""
    target = ["-m", "experiments.train", "--", "--model", model, *option_argv(options), "--run-dir", str(directory)]
    command = torchrun_command(processes, *target) if processes > 1 else [sys.executable, *target]
    subprocess.run(command, cwd=ROOT, env=child_environment(threads), check=True, capture_output=True)
    return json.loads((directory / "final.json").read_text())["tokens_per_second"]


def run(quick, root):
    steps, batch, length = (4, 8, 16) if quick else (60, 32, 128)
    rows = []
    for name, (model, options) in MODELS.items():
        options = {"dataset": "tinyshakespeare", "steps": steps, "batch": batch, "length": length,
                   "eval_every": steps, "checkpoint_every": steps, "eval_tokens": 2048, **options}
        rates = {label: tokens_per_second(model, options, root / f"{model}-{label}", processes, threads)
                 for label, processes, threads in (("1 process", 1, None), ("1 process, 1 thread", 1, 1),
                                                   ("2 ranks, 1 thread each", 2, 1))}
        shape = f"batch {batch} x {length}, {steps} steps"
        for single in ("1 process", "1 process, 1 thread"):
            rows.append(row(f"{name} training tokens/s, 2 ranks (1 thread each) / {single} ({shape})",
                            rates["2 ranks, 1 thread each"] / rates[single], tokens_per_second=rates))
            print(f"{rows[-1]['name']}: {rows[-1]['ratio']:.2f}", flush=True)
    return rows


def main(argv=None):
    parser = CommandParser("experiments.bench.data_parallel", __doc__)
    parser.add_argument("--quick", action="store_true", help="4 steps of 8 x 16 (a smoke test)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"),
                        help="the directory of the results (the committed ones: experiments/results/bench)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        rows = run(args.quick, Path(scratch))
    path = save_record(args.out / ("data_parallel_quick.json" if args.quick else "data_parallel.json"),
                       {"quick": args.quick, "seconds": time.perf_counter() - start, "rows": rows})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
