"""Sweep presets and sweep loading. A sweep is a module that defines ``RUNS``, a list of
``experiments.sweep_run.SweepRun`` with unique names, and optionally ``NEEDS_CUDA = "why"``,
``TUNING`` (an ``experiments.sweep_run.Tuning``: choose each arm's learning rate on validation
first, see ``experiments.tuning``) and ``OUT`` (where its committed results are: ``--preset`` reads
the chosen rates there; commands write there only when ``--out`` names it).

A sweep is named by a preset (``PRESETS``: a study's preset module), a dotted module name, or the
path of a Python file (imported as a module of its own).
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import NamedTuple

from experiments.sweep_run import SweepRun, Tuning

PRESETS = {"charlm-ptb": "experiments.studies.charlm_early.charlm_ptb",
           "charlm-shakespeare": "experiments.studies.charlm_early.charlm_shakespeare",
           "paper": "experiments.studies.charlm_v2.charlm_paper", "charlm-v2-ptb": "experiments.studies.charlm_v2.charlm_v2_ptb",
           "charlm-v2-shakespeare": "experiments.studies.charlm_v2.charlm_v2_shakespeare", "nar-cpu": "experiments.studies.noisy_recall.nar_cpu",
           "nar-cpu-ns-steps": "experiments.studies.noisy_recall.nar_cpu_ns_steps", "nar-paper": "experiments.studies.noisy_recall.nar_paper",
           "state-tracking": "experiments.studies.state_tracking.state_tracking",
           "copy": "experiments.studies.state_tracking.copy",
           "lstm-gap-screen": "experiments.studies.lstm_gap.screen",
           "lstm-gap-study": "experiments.studies.lstm_gap.study",
           "lstm-gap-shakespeare": "experiments.studies.lstm_gap.shakespeare"}  # {preset: the module that defines its RUNS}


class Sweep(NamedTuple):
    """A loaded sweep: ``name`` (its file stem), ``source`` (what named it), ``runs``, ``needs_cuda``
    ('' if not), ``tuning`` (a Tuning, or None: the runs' own rates) and ``out`` (its committed results, or None)."""

    name: str
    source: str
    runs: list
    needs_cuda: str
    tuning: Tuning | None
    out: str | None


def _import(sweep):
    if sweep in PRESETS:
        return importlib.import_module(PRESETS[sweep])
    path = Path(sweep)
    if path.suffix == ".py":
        if not path.is_file():
            raise FileNotFoundError(f"no sweep file {sweep}; presets: {sorted(PRESETS)}")
        spec = importlib.util.spec_from_file_location(f"sweep_file_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(sweep)
    except ModuleNotFoundError as error:
        if error.name is not None and not sweep.startswith(error.name):
            raise  # the sweep module exists but imports something missing
        raise FileNotFoundError(f"no sweep {sweep!r}: not a .py file, a module or one of the presets "
                                f"{sorted(PRESETS)}") from None


def load_sweep(sweep):
    """The Sweep named by ``sweep`` (preset, module or file), its ``RUNS`` validated."""
    sweep = str(sweep)
    module = _import(sweep)
    runs = getattr(module, "RUNS", None)
    if not isinstance(runs, list) or not all(isinstance(run, SweepRun) for run in runs):
        raise ValueError(f"{sweep} must define RUNS, a list of experiments.sweep_run.SweepRun")
    names = [run.name for run in runs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"{sweep}: run names must be unique; repeated: {duplicates}")
    tuning = getattr(module, "TUNING", None)
    if tuning is not None and not isinstance(tuning, Tuning):
        raise ValueError(f"{sweep}: TUNING must be an experiments.sweep_run.Tuning, got {type(tuning).__name__}")
    name = Path(module.__file__).stem
    return Sweep(name, sweep, runs, getattr(module, "NEEDS_CUDA", ""), tuning, getattr(module, "OUT", None))


def load_runs(sweep):
    """The validated ``RUNS`` of a sweep."""
    return load_sweep(sweep).runs
