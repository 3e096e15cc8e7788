"""Run a sweep: ``python -m experiments.sweep SWEEP.py [--workers 2] [--out DIR]``.

A sweep file is a Python file that defines ``RUNS``, a list of ``experiments.sweep.SweepRun``
(one training run each: a unique name, the model, the dataset and the ``--key value`` options of
``experiments.train``). Runs go to ``DIR/<name>`` (default ``runs/<sweep file stem>``) on a local
process pool. A run whose ``final.json`` exists is skipped, so an interrupted sweep continues
where it stopped (an unfinished run resumes from its checkpoint); a run that fails writes
``error.txt`` and the others go on. ``DIR/sweep.json`` records every run's status.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import runpy
import traceback
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep. ``options``: ``{"n": 16, "lr": 1e-3, ...}`` as ``--n 16 --lr 0.001``."""

    name: str
    model: str
    dataset: str
    options: dict = field(default_factory=dict)

    def argv(self, directory):
        pairs = [item for key, value in self.options.items() for item in (f"--{key.replace('_', '-')}", str(value))]
        return ["--model", self.model, "--dataset", self.dataset, *pairs, "--run-dir", str(directory)]


def load_runs(path):
    """The ``RUNS`` of a sweep file, validated (a list of SweepRun with unique names)."""
    runs = runpy.run_path(str(path)).get("RUNS")
    if not isinstance(runs, list) or not all(isinstance(run, SweepRun) for run in runs):
        raise ValueError(f"{path} must define RUNS, a list of experiments.sweep.SweepRun")
    names = [run.name for run in runs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"{path}: run names must be unique; repeated: {duplicates}")
    return runs


def _set_threads(count):
    import torch

    torch.set_num_threads(count)


def execute(run, directory):
    """Worker: train one run (resuming if it has a checkpoint); returns its status."""
    from experiments import train

    directory = Path(directory)
    try:
        if (directory / "checkpoint.pt").exists():
            train.main(["--resume", str(directory)])
        else:
            train.main(run.argv(directory))
        return {"name": run.name, "status": "done"}
    except Exception:  # noqa: BLE001 - one failing run must not stop the sweep
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "error.txt").write_text(traceback.format_exc())
        return {"name": run.name, "status": "failed", "error": traceback.format_exc().strip().splitlines()[-1]}


def run_sweep(path, out=None, workers=2):
    """Run every pending run of the sweep file ``path``; returns ``{name: status}``."""
    runs = load_runs(path)
    out = Path(out) if out is not None else Path("runs") / Path(path).stem
    out.mkdir(parents=True, exist_ok=True)
    status = {run.name: {"name": run.name, "status": "skipped (complete)"} for run in runs
              if (out / run.name / "final.json").exists()}
    pending = [run for run in runs if run.name not in status]
    threads = max(1, (os.cpu_count() or 1) // workers)  # no oversubscription: it slows torch manyfold
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, initializer=_set_threads,
                                                initargs=(threads,)) as pool:
        futures = [pool.submit(execute, run, out / run.name) for run in pending]
        for future in concurrent.futures.as_completed(futures):
            result = future.result()
            status[result["name"]] = result
    ordered = {run.name: status[run.name] for run in runs}
    (out / "sweep.json").write_text(json.dumps({"sweep": str(path), "runs": ordered}, indent=2))
    return ordered


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    status = run_sweep(args.sweep, args.out, args.workers)
    failed = [name for name, s in status.items() if s["status"] == "failed"]
    print(json.dumps({"runs": len(status), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    # Run the imported module's main: sweep files build ``experiments.sweep.SweepRun``, which is
    # not this ``__main__`` module's class of the same name.
    from experiments.sweep import main as sweep_main

    raise SystemExit(sweep_main())
