"""Training in child processes: torchrun's command line and the environment a child gets.

The sweep's multi-process runs, the data-parallel benchmark and the distributed tests start
``torchrun --standalone --nproc_per_node=N`` (or one plain process) from a process that may itself
be a rank; the child must start its own world and import this checkout whatever its directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose experiments.train a child runs
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def torchrun_command(processes, *target):
    """``python -m torch.distributed.run --standalone --nproc_per_node=processes *target`` (``target``:
    ``-m module -- ARGS`` or ``script ARGS``), this machine's processes only."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", *target]


def child_environment(threads=None):
    """This process's environment without torchrun's variables (a child starts its own world), with
    ``ROOT`` first on ``PYTHONPATH`` and ``OMP_NUM_THREADS=threads`` (each rank's torch threads;
    None: the inherited setting)."""
    environment = {key: value for key, value in os.environ.items() if key not in TORCHRUN_VARIABLES}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [environment.get("PYTHONPATH")])])
    if threads is not None:
        environment["OMP_NUM_THREADS"] = str(threads)
    return environment
