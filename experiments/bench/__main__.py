"""``python -m experiments.bench [--quick] [--threads 1 2]``: every benchmark, ratios measured in one run.

Prints one line per benchmark (ratio, and target met or missed; ``info`` for the information rows,
which have no target) and saves them with the machine's description to ``--out``/``bench.json``
(default ``runs/bench``; the committed ones are in ``experiments/results/bench``; ``bench_quick.json``
with ``--quick``, small shapes for a smoke test). ``--threads 1 2`` runs the whole suite once per torch thread count, each into its own
``bench_threadsN.json``. Never used as a timed test.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from experiments.bench import exp, group_rnn, group_transformer, mlstm
from experiments.bench.timing import save_record
from experiments.cli import CommandParser

BENCHMARKS = {"exp": exp.run, "group_rnn": group_rnn.run, "group_transformer": group_transformer.run,
              "mlstm": mlstm.run}


def main(argv=None):
    parser = CommandParser("experiments.bench", __doc__)
    parser.add_argument("--quick", action="store_true", help="small shapes and few repetitions (smoke test)")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS), default=sorted(BENCHMARKS),
                        help="the benchmarks to run")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"),
                        help="the directory of the results (the committed ones: experiments/results/bench)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:k]; a CUDA run writes bench_cuda.json")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="torch threads for every contender, one suite per value (default: torch's; "
                             "the file name gets _threadsN)")
    args = parser.parse_args(argv)
    if args.threads is not None and min(args.threads) < 1:
        parser.error("--threads must be at least 1")
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        parser.error(f"--device: {error}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    initial = torch.get_num_threads()
    try:
        for threads in args.threads or [None]:
            if threads is not None:
                torch.set_num_threads(threads)
            run_suite(args, device, threads)
    finally:
        torch.set_num_threads(initial)
    return 0


def run_suite(args, device, threads):
    """Every benchmark of ``args.only`` at the current thread count, into one JSON file."""
    rows, start = [], time.perf_counter()
    for name in args.only:
        for result in BENCHMARKS[name](quick=args.quick, device=device):
            rows.append(result)
            verdict = "info" if result["met"] is None else ("met " if result["met"] else "MISS")
            target = "information" if result["target"] is None else f"target {result['op']} {result['target']:g}"
            print(f"{verdict} {result['ratio']:8.2f} ({target})  {result['name']}", flush=True)
    stem = "bench_quick" if args.quick else "bench"
    stem += "_cuda" if device.type == "cuda" else ""
    path = args.out / (stem + (f"_threads{threads}" if threads is not None else "") + ".json")
    save_record(path, {"quick": args.quick, "seconds": time.perf_counter() - start, "rows": rows}, device)
    print(f"saved {path}")


if __name__ == "__main__":
    raise SystemExit(main())
