"""Timing helpers: contenders run in one process, alternating, after a warm-up; medians compared."""

from __future__ import annotations

import os
import platform
import statistics
import time


def alternate(contenders, repeats=5, warmup=1):
    """Median seconds per call of each contender, measured in turns (a, b, a, b, ...).

    Args:
        contenders: ``{name: zero-argument callable}``.
        repeats: timed calls per contender.
        warmup: untimed calls per contender first.

    Returns:
        ``{name: median seconds}``.
    """
    for _ in range(warmup):
        for run in contenders.values():
            run()
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def row(name, ratio, op, target, **details):
    """One benchmark row: ``met`` is ``ratio op target`` with op '>=' or '<='."""
    met = ratio >= target if op == ">=" else ratio <= target
    return {"name": name, "ratio": ratio, "target": target, "op": op, "met": bool(met), **details}


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


def machine_record():
    """The machine the numbers were measured on: cores, torch version and threads, platform."""
    import torch

    return {"cpus": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "platform": platform.platform(), "processor": platform.processor()}
