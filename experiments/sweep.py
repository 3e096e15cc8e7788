"""Run a sweep: ``python -m experiments.sweep SWEEP [--workers 2] [--out DIR]``.

Every option, the output files and what happens when a worker dies: ``main``.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import traceback
from pathlib import Path

import torch

from experiments import tuning
from experiments.cli import CommandParser
from experiments.sweep_run import arm_of
from experiments.sweeps import PRESETS, load_sweep
from experiments.training.config import build_config
from experiments.training.launch import ROOT, child_environment, torchrun_command
from experiments.training.loop import run as run_training


def _set_threads(count):
    torch.set_num_threads(count)


def execute(run, directory, threads=None):
    """Worker: train one run (resuming if it has a checkpoint); returns its status. A run of several
    ``processes`` is trained by that many under torchrun (``train_under_torchrun``)."""
    directory = Path(directory)
    try:
        if not (directory / "final.json").exists():  # it may have finished (by another process) since listed
            config = build_config(run.model, run.task, run.options)  # refused here, before any launch
            if run.processes == 1:
                run_training(config, directory)
            elif config.train.batch % run.processes:
                raise ValueError(f"--batch {config.train.batch} does not split across the run's {run.processes} processes")
            else:
                train_under_torchrun(run, directory, threads)
        (directory / "error.txt").unlink(missing_ok=True)  # an earlier attempt's failure, now stale
        return {"name": run.name, "status": "done"}
    except Exception:  # noqa: BLE001 - one failing run must not stop the sweep
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "error.txt").write_text(traceback.format_exc())
        return {"name": run.name, "status": "failed", "error": traceback.format_exc().strip().splitlines()[-1]}


def train_under_torchrun(run, directory, threads=None):
    """Train ``run`` in ``directory`` with ``run.processes`` processes: ``torchrun --standalone
    --nproc_per_node=N -m experiments.train -- ARGS`` on this machine (gloo on the CPU, NCCL on
    CUDA; rank 0 writes the run directory), each process with ``threads`` torch threads. Its output
    goes where this process's goes.

    Raises:
        RuntimeError: torchrun ended with an error (its exit code; the ranks' tracebacks are in the output).
    """
    command = torchrun_command(run.processes, "-m", "experiments.train", "--", *run.argv(), "--run-dir", str(directory))
    code = subprocess.run(command, cwd=ROOT, env=child_environment(threads)).returncode
    if code:
        raise RuntimeError(f"torchrun with {run.processes} processes exited with code {code} "
                           "(each rank's traceback is in the sweep's output)")


def _execute_with_threads(run, directory, threads):
    """A Ray task: ``execute`` with the same per-worker thread count as the process pool."""
    _set_threads(threads)
    return execute(run, directory, threads)


def _worker(run, directory, threads, sender):
    """A pool process: ``execute`` one run and send its status back."""
    _set_threads(threads)
    sender.send(execute(run, directory, threads))
    sender.close()


def _run_on_pool(pending, out, workers, threads):
    """Each run in a process of its own, at most ``workers`` processes at a time (a run of
    ``processes`` N counts N; one larger than ``workers`` trains alone); statuses in completion order.

    One process per run: a worker that outlived edits to the code would still run the old modules
    while git_revision.txt names the new checkout. A worker that dies (killed, out of memory) fails
    its own run, with ``error.txt`` saying how it ended, and the others go on.
    """
    context = multiprocessing.get_context("spawn")  # a forked child can inherit a lock a parent thread held
    waiting, running, results = list(reversed(pending)), {}, []
    while waiting or running:
        while waiting and (not running or sum(run.processes for run, _ in running.values())
                           + waiting[-1].processes <= workers):
            run = waiting.pop()
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_worker, args=(run, out / run.name, threads, sender))
            process.start()
            sender.close()  # the child holds the only sending end: its death ends the pipe
            running[receiver] = (run, process)
        for receiver in multiprocessing.connection.wait(list(running)):
            run, process = running.pop(receiver)
            try:
                result = receiver.recv()
            except EOFError:  # the process died before it sent a status
                result = None
            receiver.close()
            process.join()
            results.append(_worker_died(run, out / run.name, process.exitcode) if result is None else result)
    return results


def _worker_died(run, directory, exitcode):
    """The status of a run whose worker process ended without one; written to ``error.txt``."""
    how = f"signal {signal.Signals(-exitcode).name}" if exitcode is not None and exitcode < 0 else f"exit code {exitcode}"
    error = f"the worker process training this run died ({how}) before it finished"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "error.txt").write_text(error + "\n")
    return {"name": run.name, "status": "failed", "error": error}


def _run_on_ray(pending, out, threads):
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, logging_level="warning")
    try:
        task = ray.remote(_execute_with_threads)  # a run of N processes: one task of N processes' CPUs
        return ray.get([task.options(num_cpus=threads * run.processes).remote(run, str((out / run.name).resolve()),
                                                                               threads) for run in pending])
    finally:
        if started_here:
            ray.shutdown()


EXECUTORS = ("local", "ray")


def _run_stage(runs, out, record, workers, executor, known=None, threads=None):
    """Run the pending ``runs`` into ``out``; write ``out/<record>`` and return ``{name: status}``
    (``known``: statuses decided without running; ``threads``: torch threads per run, default the
    cores shared out among the workers). A stage that trains nothing leaves an existing record as it
    is, so re-running a finished sweep changes no file."""
    out.mkdir(parents=True, exist_ok=True)
    status = {**(known or {}), **{run.name: {"name": run.name, "status": "skipped (complete)"} for run in runs
                                  if (out / run.name / "final.json").exists()}}
    pending = [run for run in runs if run.name not in status]
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // workers)  # no oversubscription: it slows torch manyfold
    results = _run_on_ray(pending, out, threads) if executor == "ray" else _run_on_pool(pending, out, workers, threads)
    status.update({result["name"]: result for result in results})
    status = {name: status[name] for name in [*(known or {}), *(run.name for run in runs)]}
    if pending or not (out / record["file"]).exists():
        (out / record["file"]).write_text(json.dumps({"sweep": record["source"], "runs": status}, indent=2))
    return status


def _settle_rates(runs, recipe, chosen, out, record, workers, executor, threads=None):
    """Reuse full-length search runs, and with ``recipe.stability_margin`` train each arm's first run
    until its rate is settled (``experiments.tuning.settle_rates``); returns ``{name: status}`` of the
    first runs trained (the last attempt of each)."""
    trained = {}
    while True:
        tuning.reuse_search_runs(tuning.with_chosen_rates(runs, chosen)[0], recipe, out / "tune", out)
        if recipe.stability_margin is None:
            return trained
        failed = {arm_of(name) for name, result in trained.items() if result["status"] == "failed"}
        first = [run for run in tuning.settle_rates(runs, recipe, chosen, out) if arm_of(run.name) not in failed]
        if not first:
            return trained
        tuning.reuse_search_runs(first, recipe, out / "tune", out)  # a superseded arm's next rate may be searched
        first = [run for run in first if not (out / run.name / "final.json").exists()]
        if first:
            trained.update(_run_stage(first, out, record, workers, executor, threads=threads))


def run_sweep(sweep, out=None, workers=2, allow_cpu=False, executor="local", threads=None):
    """Run every pending run of ``sweep`` (a preset, module or file); returns ``{name: status}``.

    ``executor``: ``local`` (a process pool of ``workers``) or ``ray`` (see the module docstring).
    ``threads``: torch threads per run (default: the machine's cores divided among the workers; give
    fewer where other work shares the machine, whose threads would otherwise contend with the runs').
    A sweep with ``TUNING`` first runs its learning-rate search in ``out/tune`` (grown past the grid's
    edges with ``TUNING.extend_edges``) and trains each arm at its chosen rate (``experiments.tuning``);
    an arm whose search has no finished run fails.

    Raises:
        RuntimeError: the sweep sets ``NEEDS_CUDA``, no CUDA device is present and ``allow_cpu``
            is False (nothing has started).
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose from {EXECUTORS}")
    loaded = load_sweep(sweep)
    runs = loaded.runs
    if loaded.needs_cuda and not torch.cuda.is_available() and not allow_cpu:
        raise RuntimeError(f"{loaded.name}: no CUDA device. {loaded.needs_cuda} Pass --allow-cpu to start anyway.")
    out = Path(out) if out is not None else Path("runs") / loaded.name
    record, known = {"file": f"sweep-{loaded.name}.json", "source": loaded.source}, {}
    if loaded.tuning is not None:
        searched = set()
        while True:  # with extend_edges the search grows past the edges its finished runs chose
            search = tuning.tuning_runs(runs, loaded.tuning, out / "tune")
            if {run.name for run in search} <= searched:
                break
            searched |= {run.name for run in search}
            _run_stage(search, out / "tune", record, workers, executor, threads=threads)
        chosen = tuning.choose_rates(runs, loaded.tuning, out / "tune")
        known = _settle_rates(runs, loaded.tuning, chosen, out, record, workers, executor, threads)
        runs, untuned = tuning.with_chosen_rates(runs, chosen)
        failed = {arm_of(name) for name, result in known.items() if result["status"] == "failed"}
        known.update({run.name: {"name": run.name, "status": "failed", "error": "the first run of its arm failed"}
                      for run in runs if arm_of(run.name) in failed and run.name not in known})
        runs = [run for run in runs if run.name not in known]
        known.update({name: {"name": name, "status": "failed", "error": "no learning-rate search run of its arm finished"}
                      for name in untuned})
    status = _run_stage(runs, out, record, workers, executor, known, threads)
    return {run.name: status[run.name] for run in loaded.runs}


def main(argv=None):
    """Run the sweep named on the command line (``python -m experiments.sweep --help``).

    SWEEP is a preset (``experiments.sweeps.PRESETS``), a dotted module name or a Python file that
    defines ``RUNS``, a list of ``experiments.sweep_run.SweepRun`` (one run each: a unique name, a
    model, a task and typed options; see ``experiments.sweeps``). Each run is trained by
    ``experiments.training.loop.run`` into ``DIR/<name>`` (default ``runs/<sweep file stem>``) on a local
    process pool. A run whose ``final.json`` exists is skipped and an unfinished one resumes from its
    checkpoint, so an interrupted sweep continues where it stopped; a run that fails, or whose
    worker process dies, writes ``error.txt`` and the others go on. ``DIR/sweep-<sweep file stem>.json`` records every run's
    status (one file per sweep, so sweeps that share a directory keep theirs).

    ``--executor ray`` sends the same runs to a Ray cluster instead (``RAY_ADDRESS`` names it;
    without it Ray starts a local one), one task per run with ``--workers`` tasks' worth of CPUs
    shared out as on the pool. The run directories must be on storage every node sees.

    A ``SweepRun`` with ``processes=N`` is trained data-parallel by N processes under torchrun on one
    machine (``train_under_torchrun``): on the pool it takes N of the ``--workers`` slots, on Ray one
    task with N runs' worth of CPUs, which launches torchrun on its node.

    A sweep that sets ``TUNING`` chooses each arm's learning rate on validation first: its search
    runs go to ``DIR/tune/`` and the choice to ``DIR/chosen_rates.json`` (``experiments.tuning``). A
    study's committed results (its sweep's ``OUT``) are written only when ``--out`` names them. With
    ``TUNING.stability_margin`` each arm's first run trains first, and an arm whose first run diverged moves to its next-best rate (its runs at the
    diverged rate go to ``DIR/diverged/``) before the other runs start; with ``TUNING.extend_edges``
    the runs at a rate the grown search no longer chooses go to ``DIR/superseded/``.

    A sweep may set ``NEEDS_CUDA = "why"``: without a CUDA device the sweep then stops before
    starting, printing why, unless ``--allow-cpu`` is given. Presets that set ``device: auto``
    resolve it when each run starts, on the machine that runs it.
    """
    parser = CommandParser("experiments.sweep", __doc__)
    parser.add_argument("sweep", help=f"a sweep file or module, or a preset: {', '.join(sorted(PRESETS))}")
    parser.add_argument("--out", type=Path, default=None, help="the sweep's directory (default: runs/<sweep>; a study's committed results only when named here)")
    parser.add_argument("--workers", type=int, default=2, help="runs trained at once")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per run (default: the cores divided among the workers)")
    parser.add_argument("--allow-cpu", action="store_true", help="start a sweep that asks for CUDA on the CPU")
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local process pool, or a Ray cluster (RAY_ADDRESS, else a local one)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    with parser.refusals(FileNotFoundError, RuntimeError):  # an unknown sweep, or no CUDA: before any run
        status = run_sweep(args.sweep, args.out, args.workers, args.allow_cpu, args.executor, args.threads)
    failed = [name for name, s in status.items() if s["status"] == "failed"]
    print(json.dumps({"runs": len(status), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
