"""A run directory's files: written whole or not at all (a crash or a full disk leaves the last
complete version), the lock of the one process that trains there, and what decides whether a
directory may be resumed or is finished. The files themselves: ``experiments.train.main``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import filelock
import torch

LOCK_FILE = "run.lock"  # held by the process training in a run directory
# what a resume may change of the configuration it continues
RESUME_OVERRIDES = ("steps", "eval_every", "checkpoint_every", "device", "compile", "cuda_graphs",
                    "checkpoint_activations")


def atomic_write_bytes(data, path):
    """Write ``data`` to a temporary file in the same directory, then rename over ``path``.

    Raises:
        OSError: the write failed (a full disk: ENOSPC), naming ``path`` and the error code; the
            temporary file is removed and ``path`` is left as it was.
    """
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise _naming(error, "write", path) from error
    os.replace(temporary, path)


def append_line(line, path):
    """Append ``line`` and a newline to ``path`` (a failed write raises as in ``atomic_write_bytes``;
    a line torn by it is dropped on resume)."""
    try:
        with open(path, "a") as handle:
            handle.write(line + "\n")
    except OSError as error:
        raise _naming(error, "append to", path) from error


def _naming(error, verb, path):
    """An OSError like ``error`` whose message names ``path`` and the error code (ENOSPC: a full disk)."""
    code = errno.errorcode.get(error.errno, "unknown error")
    return OSError(error.errno, f"cannot {verb} {path}: {error.strerror} ({code})", str(path))


def atomic_save(obj, path):
    """``torch.save`` of ``obj`` to ``path`` through ``atomic_write_bytes`` (serialized in memory first,
    so that a failed write raises the operating system's error, not the archive writer's)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(buffer.getbuffer(), path)


def atomic_write_text(text, path):
    """``text`` (UTF-8) to ``path`` through ``atomic_write_bytes``."""
    atomic_write_bytes(text.encode(), path)


@contextlib.contextmanager
def holding_lock(directory):
    """Hold ``directory``'s ``LOCK_FILE`` (``filelock``) for the body: one process at a time trains there.

    Raises:
        ValueError: another process holds it, naming the lock file.
    """
    lock = filelock.FileLock(Path(directory) / LOCK_FILE, blocking=False)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise ValueError(f"{directory} is in use: another process holds its lock {lock.lock_file}") from None
    try:
        yield
    finally:
        lock.release()


def config_differences(saved, config):
    """``{"part.field": (saved value, new value)}`` where two RunConfigs differ (compared as JSON)."""
    before, after = (json.loads(json.dumps(c.to_json())) for c in (saved, config))
    return {f"{part}.{name}": (before[part].get(name), after[part].get(name))
            for part in before for name in sorted(set(before[part]) | set(after[part]))
            if before[part].get(name) != after[part].get(name)}


def check_resumable(saved, config, step, directory):
    """Refuse to resume the checkpoint of ``saved`` (at ``step``) as ``config``; the changed overrides.

    Returns:
        ``config_differences(saved, config)``, all of them ``RESUME_OVERRIDES``.

    Raises:
        ValueError: a field other than ``RESUME_OVERRIDES`` differs (an edited ``config.json``, or
            another run's configuration), named in the message; or ``steps`` below ``step``.
    """
    differences = config_differences(saved, config)
    allowed = {f"train.{name}" for name in RESUME_OVERRIDES}
    refused = {key: values for key, values in differences.items() if key not in allowed}
    if refused:
        listed = "; ".join(f"{key} is {new!r} here but {old!r} in the checkpoint" for key, (old, new) in refused.items())
        raise ValueError(f"cannot resume {directory}: {listed}. A resume may change only "
                         f"{', '.join('--' + n.replace('_', '-') for n in RESUME_OVERRIDES)}")
    if config.train.steps < step:
        raise ValueError(f"cannot resume {directory} with steps {config.train.steps}: its checkpoint is at step {step}")
    return differences


CHECKPOINT_KEYS = ("step", "config", "model", "optimizers", "numpy_rng", "torch_rng", "train_seconds")  # "best" if any


def load_checkpoint_file(path, keys=()):
    """A checkpoint's contents, loaded onto the CPU with ``weights_only=True`` (tensors and plain data
    only); ``keys``: the entries it must hold (``CHECKPOINT_KEYS`` for a checkpoint to resume from, none
    for ``best.pt``). ``load_state_dict`` copies them to the device: a model's onto its parameters, an optimizer's
    moments beside their parameters, while its step counts stay on the host (no read back per step).

    Raises:
        ValueError: the file holds a pickled object of another kind (it would run code to load), is
            empty or cut short, its step is not a count of steps (an int ≥ 0), or it lacks one of
            ``keys``.
    """
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive, whose directory comes last
        raise ValueError(f"{path} is not a whole checkpoint ({Path(path).stat().st_size} bytes: empty or cut short); "
                         "restore it, or delete it to train the run from the start")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(f"refusing to load {path}: it holds a pickled object, not only tensors and plain data, "
                         f"and loading it could run code ({str(error).splitlines()[0]})") from None
    step = state.get("step") if isinstance(state, dict) else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{path} is not a checkpoint of this trainer: its step is {step!r}, not an int ≥ 0")
    missing = [key for key in keys if key not in state]
    if missing:
        raise ValueError(f"{path} is not a checkpoint of this trainer: it lacks {', '.join(missing)}")
    return state


def finished_record(directory, steps):
    """``directory``'s ``final.json`` if it records a run that finished all of ``steps``, else None."""
    path = Path(directory) / "final.json"
    if not path.exists():
        return None
    final = json.loads(path.read_text())
    return final if final.get("steps") == steps and "stopped" not in final else None
