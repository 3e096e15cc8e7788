"""Timing helpers: contenders run in one process, alternating, after a warm-up; medians compared. And
the JSON record every benchmark saves, with the machine and the revision it was measured on."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

from experiments.provenance import git_revision


def alternate(contenders, repeats=5, warmup=1, device="cpu"):
    """Median seconds per call of each contender, measured in turns (a, b, a, b, ...).

    Args:
        contenders: ``{name: zero-argument callable}``.
        repeats: timed calls per contender.
        warmup: untimed calls per contender first.
        device: where the contenders run; on CUDA every timed call is bracketed by a
            synchronisation, so the time is the kernels', not the launch's.

    Returns:
        ``{name: median seconds}``.
    """
    for _ in range(warmup):
        for run in contenders.values():
            run()
    synchronize = _synchronizer(device)
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            synchronize()
            start = time.perf_counter()
            run()
            synchronize()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _synchronizer(device):
    import torch

    device = torch.device(device)
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def row(name, ratio, op=None, target=None, **details):
    """One benchmark row: ``met`` is ``ratio op target`` with op '>=' or '<='; without a target an
    information row (``op``, ``target`` and ``met`` None)."""
    if (op is None) != (target is None):
        raise ValueError("give both op and target, or neither (an information row)")
    met = None if op is None else bool(ratio >= target if op == ">=" else ratio <= target)
    return {"name": name, "ratio": ratio, "target": target, "op": op, "met": met, **details}


def training_step(model, optimizer, tokens):
    """A zero-argument callable: one language-model training step on ``tokens: [B, T + 1]``."""
    from manifold_impl.losses import cross_entropy

    def step():
        logits, _ = model(tokens[:, :-1])
        loss = cross_entropy(logits, tokens[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def machine_record(device="cpu"):
    """The machine the numbers were measured on: cores, Python, torch and CUDA versions, threads, platform, device."""
    import torch

    record = {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
              "cuda": torch.version.cuda, "threads": torch.get_num_threads(), "platform": platform.platform(),
              "processor": platform.processor(), "device": str(device)}
    if torch.device(device).type == "cuda":
        record["gpu"] = torch.cuda.get_device_name(device)
    return record


def save_record(path, record, device="cpu"):
    """Write ``record`` after ``machine`` (``machine_record(device)``) and ``revision`` (this
    checkout's HEAD) to the JSON file ``path``, making its directory; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine_record(device), "revision": git_revision(), **record}, indent=2))
    return path
