"""Summary statistics for results over seeds (t-distribution confidence intervals), and arms compared
seed by seed."""

from __future__ import annotations

import math

import numpy as np
import scipy.stats

TEST_SCORES = {"windowed": "test_bits_per_token", "carried": "test_carried_bits_per_token"}  # a language
# model run's test bits per character in final.json: windowed, and with the state carried across the split


def mean_ci(values, confidence=0.95):
    """Mean and half-width of its two-sided t confidence interval: ``(mean, half_width)``.

    ``half_width = t_{(1+confidence)/2, k−1} · s / √k`` with the sample standard deviation s of the
    k values; NaN for a single value (no spread to estimate).
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"expected a non-empty 1-D sequence of values, got shape {values.shape}")
    mean = float(values.mean())
    if values.size == 1:
        return mean, math.nan
    quantile = scipy.stats.t.ppf(0.5 + confidence / 2, df=values.size - 1)
    return mean, float(quantile * values.std(ddof=1) / math.sqrt(values.size))


def paired_difference_ci(first, second, confidence=0.95):
    """Mean and CI half-width of ``first − second`` paired by position (e.g. by seed)."""
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if first.shape != second.shape:
        raise ValueError(f"paired values need equal shapes, got {first.shape} and {second.shape}")
    return mean_ci(first - second, confidence)


def format_interval(values, digits=4, unit="run"):
    """``"mean ± half-width"`` of the finite values; runs that diverged (NaN/inf) are counted, not averaged.

    A single finite value reads ``"x (one run)"`` (``unit`` names what a value is); none reads
    ``"diverged (k/k)"``.
    """
    finite = [v for v in values if np.isfinite(v)]
    diverged = len(values) - len(finite)
    if not finite:
        return f"diverged ({diverged}/{len(values)})"
    mean, half = mean_ci(finite)
    text = f"{mean:.{digits}f} ± {half:.{digits}f}" if np.isfinite(half) else f"{mean:.{digits}f} (one {unit})"
    return text + (f"; {diverged}/{len(values)} diverged" if diverged else "")


def _seed_scores(runs, key):
    scores = {run["config"]["train"]["seed"]: run["final"].get(key) for run in runs}
    return {seed: score for seed, score in scores.items() if score is not None and math.isfinite(score)}


def paired(arms, first, second, key):
    """The seed-paired comparison ``first − second`` of ``key`` (a final.json score), or None when
    the arms share no seed with finite scores: ``{"seeds", "difference", "half_width",
    "relative_percent", "relative_half_width"}`` (half-widths NaN for one seed)."""
    a, b = (_seed_scores(arms.get(arm, []), key) for arm in (first, second))
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    x, y = np.array([a[s] for s in seeds]), np.array([b[s] for s in seeds])
    difference, half = mean_ci(x - y)
    relative, relative_half = mean_ci(100 * (x - y) / y)
    return {"seeds": seeds, "difference": difference, "half_width": half, "relative_percent": relative,
            "relative_half_width": relative_half}
