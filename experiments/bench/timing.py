"""Timing helpers: contenders run in one process, alternating, after a warm-up; medians compared."""

from __future__ import annotations

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
