"""Run a sweep: ``python -m experiments.sweep SWEEP.py|PRESET [--workers 2] [--out DIR]``.

A sweep file is a Python file that defines ``RUNS``, a list of ``experiments.sweep.SweepRun``
(one run each: a unique name and the ``--key value`` options of its program, ``experiments.train``
— with the model and the dataset — or ``experiments.recall``). A preset is the name of a sweep
file in ``experiments/sweeps/`` (``PRESETS``). Runs go to ``DIR/<name>`` (default
``runs/<sweep file stem>``) on a local process pool. A run whose ``final.json`` exists is skipped,
so an interrupted sweep continues where it stopped (an unfinished training run resumes from its
checkpoint; a recall run starts over); a run that fails writes ``error.txt`` and the others go on.
``DIR/sweep-<sweep file stem>.json`` records every run's status (one file per sweep, so
sweeps that share a directory keep theirs).

``--executor ray`` sends the same runs to a Ray cluster instead (``RAY_ADDRESS`` names it;
without it Ray starts a local one), one task per run with ``--workers`` tasks' worth of CPUs
shared out as on the pool. The run directories must be on storage every node sees.

A sweep file may set ``NEEDS_CUDA = "why"``: without a CUDA device the sweep then stops before
starting, printing why, unless ``--allow-cpu`` is given.
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


SWEEPS_DIR = Path(__file__).parent / "sweeps"
PRESETS = {"charlm-ptb": "charlm_ptb.py", "charlm-shakespeare": "charlm_shakespeare.py", "paper": "charlm_paper.py",
           "nar-cpu": "nar_cpu.py", "nar-cpu-ns-steps": "nar_cpu_ns_steps.py", "nar-paper": "nar_paper.py"}
PROGRAMS = ("train", "recall")


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep. ``options``: ``{"n": 16, "lr": 1e-3, ...}`` as ``--n 16 --lr 0.001``.

    ``program="train"`` runs ``experiments.train`` on ``model`` and ``dataset``;
    ``program="recall"`` runs ``experiments.recall`` (the mLSTM on noisy recall; ``model`` and
    ``dataset`` are then ``"mlstm"`` and ``"nar"``, and the task comes from the options).
    """

    name: str
    model: str
    dataset: str
    options: dict = field(default_factory=dict)
    program: str = "train"

    def __post_init__(self):
        if self.program not in PROGRAMS:
            raise ValueError(f"unknown program {self.program!r}; choose from {PROGRAMS}")
        if self.program == "recall" and (self.model, self.dataset) != ("mlstm", "nar"):
            raise ValueError("recall runs train model 'mlstm' on dataset 'nar'")

    def argv(self, directory):
        pairs = [item for key, value in self.options.items() for item in (f"--{key.replace('_', '-')}", str(value))]
        if self.program == "recall":
            return [*pairs, "--run-dir", str(directory)]
        return ["--model", self.model, "--dataset", self.dataset, *pairs, "--run-dir", str(directory)]


def resolve(sweep):
    """A preset name or a path -> the sweep file's Path."""
    if str(sweep) in PRESETS:
        return SWEEPS_DIR / PRESETS[str(sweep)]
    path = Path(sweep)
    if not path.is_file():
        raise FileNotFoundError(f"no sweep file {sweep}; presets: {sorted(PRESETS)}")
    return path


def load_sweep(path):
    """The namespace of a sweep file, with its ``RUNS`` validated (a list of SweepRun with unique names)."""
    namespace = runpy.run_path(str(path))
    runs = namespace.get("RUNS")
    if not isinstance(runs, list) or not all(isinstance(run, SweepRun) for run in runs):
        raise ValueError(f"{path} must define RUNS, a list of experiments.sweep.SweepRun")
    names = [run.name for run in runs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"{path}: run names must be unique; repeated: {duplicates}")
    return namespace


def load_runs(path):
    """The validated ``RUNS`` of a sweep file."""
    return load_sweep(path)["RUNS"]


def _set_threads(count):
    import torch

    torch.set_num_threads(count)


def execute(run, directory):
    """Worker: train one run (resuming if it has a checkpoint); returns its status."""
    from experiments import recall, train

    directory = Path(directory)
    try:
        if run.program == "recall":
            recall.main(run.argv(directory))
        elif (directory / "checkpoint.pt").exists():
            train.main(["--resume", str(directory)])
        else:
            train.main(run.argv(directory))
        return {"name": run.name, "status": "done"}
    except Exception:  # noqa: BLE001 - one failing run must not stop the sweep
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "error.txt").write_text(traceback.format_exc())
        return {"name": run.name, "status": "failed", "error": traceback.format_exc().strip().splitlines()[-1]}


def _execute_with_threads(run, directory, threads):
    """A Ray task: ``execute`` with the same per-worker thread count as the process pool."""
    _set_threads(threads)
    return execute(run, directory)


def _run_on_pool(pending, out, workers, threads):
    # One process per run: a worker that outlived edits to the code would still run the old
    # modules while git_revision.txt names the new checkout.
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, initializer=_set_threads, initargs=(threads,),
                                                max_tasks_per_child=1) as pool:
        futures = [pool.submit(execute, run, out / run.name) for run in pending]
        return [future.result() for future in concurrent.futures.as_completed(futures)]


def _run_on_ray(pending, out, threads):
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, logging_level="warning")
    try:
        task = ray.remote(num_cpus=threads)(_execute_with_threads)
        return ray.get([task.remote(run, str((out / run.name).resolve()), threads) for run in pending])
    finally:
        if started_here:
            ray.shutdown()


EXECUTORS = ("local", "ray")


def run_sweep(path, out=None, workers=2, allow_cpu=False, executor="local"):
    """Run every pending run of the sweep file (or preset) ``path``; returns ``{name: status}``.

    ``executor``: ``local`` (a process pool of ``workers``) or ``ray`` (see the module docstring).

    Raises:
        RuntimeError: the sweep sets ``NEEDS_CUDA``, no CUDA device is present and ``allow_cpu``
            is False (nothing has started).
    """
    import torch

    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose from {EXECUTORS}")
    path = resolve(path)
    namespace = load_sweep(path)
    runs = namespace["RUNS"]
    if namespace.get("NEEDS_CUDA") and not torch.cuda.is_available() and not allow_cpu:
        raise RuntimeError(f"{path.name}: no CUDA device. {namespace['NEEDS_CUDA']} "
                           "Pass --allow-cpu to start anyway.")
    out = Path(out) if out is not None else Path("runs") / Path(path).stem
    out.mkdir(parents=True, exist_ok=True)
    status = {run.name: {"name": run.name, "status": "skipped (complete)"} for run in runs
              if (out / run.name / "final.json").exists()}
    pending = [run for run in runs if run.name not in status]
    threads = max(1, (os.cpu_count() or 1) // workers)  # no oversubscription: it slows torch manyfold
    results = _run_on_ray(pending, out, threads) if executor == "ray" else _run_on_pool(pending, out, workers, threads)
    status.update({result["name"]: result for result in results})
    ordered = {run.name: status[run.name] for run in runs}
    recorded = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    (out / f"sweep-{Path(path).stem}.json").write_text(json.dumps({"sweep": recorded, "runs": ordered}, indent=2))
    return ordered


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help=f"a sweep file, or a preset: {', '.join(sorted(PRESETS))}")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--allow-cpu", action="store_true", help="start a sweep that asks for CUDA on the CPU")
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local process pool, or a Ray cluster (RAY_ADDRESS, else a local one)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    try:
        status = run_sweep(args.sweep, args.out, args.workers, args.allow_cpu, args.executor)
    except (FileNotFoundError, RuntimeError) as error:
        parser.exit(2, f"error: {error}\n")
    failed = [name for name, s in status.items() if s["status"] == "failed"]
    print(json.dumps({"runs": len(status), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    # Run the imported module's main: sweep files build ``experiments.sweep.SweepRun``, which is
    # not this ``__main__`` module's class of the same name.
    from experiments.sweep import main as sweep_main

    raise SystemExit(sweep_main())
