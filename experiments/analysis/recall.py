"""Statistics of a noisy-recall sweep (task ``recall``); used by experiments.report.

Each run's cell is read from its ``config.json``: setting ``V<vocab>-L<length>``, learning rate,
read (``ns<k>`` for k Newton–Schulz steps other than the model's default) and schedule. Per cell:
final validation accuracy as mean ± 95% t-interval over seeds, the seeds above ``SUCCESS``, and
every seed's final (outcomes are bimodal, so the mean alone hides the shape). Seed-paired differences: each NS read − plain at equal setting, lr
and schedule; cosine − constant at equal setting, lr and read. Curves: accuracy against the step, one
panel per (setting, lr), each seed a thin line and the mean a thick one.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from experiments.analysis.plotting import plt
from experiments.analysis.stats import format_interval, paired_difference_ci
from reference.config import MLSTMConfig

SUCCESS = 0.8  # a seed "succeeds" when its final validation accuracy exceeds this


def cell_of(config):
    """``(setting, lr, read, schedule)`` and the seed of a recall run's config.json record."""
    train, task, model = config["train"], config["task"], config["model"]
    read = model["read"]
    if read == "ns" and model["ns_steps"] != MLSTMConfig.ns_steps:
        read = f"ns{model['ns_steps']}"
    return (f"V{task['vocab_size']}-L{task['length']}", f"{train['lr']:g}", read, train["schedule"]), train["seed"]


def load_cells(directory):
    """``{(setting, lr, read, schedule): {seed: {"final": float, "curve": [(step, accuracy)]}}}``."""
    cells = defaultdict(dict)
    for final in sorted(Path(directory).glob("*/final.json")):
        key, seed = cell_of(json.loads((final.parent / "config.json").read_text()))
        metrics = [json.loads(line) for line in (final.parent / "metrics.jsonl").read_text().splitlines()]
        cells[key][seed] = {"final": json.loads(final.read_text())["valid_accuracy"],
                            "curve": [(m["step"], m["valid_accuracy"]) for m in metrics]}
    if not cells:
        raise ValueError(f"no finished runs (*/final.json) under {directory}")
    return dict(sorted(cells.items()))


def cell_table(cells):
    lines = ["| setting | lr | read | schedule | seeds | final accuracy (mean ± 95% CI) | seeds > 0.8 | per-seed finals |",
             "|---|---|---|---|---|---|---|---|"]
    for (setting, lr, read, schedule), seeds in cells.items():
        finals = [seeds[s]["final"] for s in sorted(seeds)]
        wins = sum(f > SUCCESS for f in finals)
        shown = " ".join(f"{f:.2f}" for f in finals)
        interval = format_interval(finals, digits=3, unit="seed")
        lines.append(f"| {setting} | {lr} | {read} | {schedule} | {len(finals)} | {interval} | "
                     f"{wins}/{len(finals)} | {shown} |")
    return "\n".join(lines) + "\n"


def paired_rows(cells):
    """Seed-paired differences between cells that differ in one factor: the read, or the schedule."""
    rows = []
    for (setting, lr, read, schedule), seeds in cells.items():
        for factor, other_key, label in (
                ("read", (setting, lr, "plain", schedule), f"{read} − plain ({schedule})"),
                ("schedule", (setting, lr, read, "constant"), f"cosine − constant ({read})")):
            first = read != "plain" if factor == "read" else schedule == "cosine"
            if not first or other_key not in cells:
                continue
            common = sorted(set(seeds) & set(cells[other_key]))
            if not common:
                continue
            mean, half = paired_difference_ci([seeds[s]["final"] for s in common],
                                              [cells[other_key][s]["final"] for s in common])
            rows.append({"setting": setting, "lr": lr, "comparison": label, "seeds": len(common),
                         "mean": mean, "half_width": half})
    return rows


def paired_table(rows):
    lines = ["| setting | lr | difference | paired seeds | mean (95% CI) |", "|---|---|---|---|---|"]
    for r in rows:
        interval = (f"{r['mean']:+.3f} ± {r['half_width']:.3f}" if np.isfinite(r["half_width"])
                    else f"{r['mean']:+.3f} (one seed)")
        lines.append(f"| {r['setting']} | {r['lr']} | {r['comparison']} | {r['seeds']} | {interval} |")
    return "\n".join(lines) + "\n"


def plot_curves(cells, path):
    panels = sorted({(setting, lr) for setting, lr, _, _ in cells})
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for axis, (setting, lr) in zip(axes[0], panels):
        for index, ((s, l, read, schedule), seeds) in enumerate(cells.items()):
            if (s, l) != (setting, lr):
                continue
            color = f"C{index % 10}"
            curves = [seeds[k]["curve"] for k in sorted(seeds)]
            for curve in curves:
                axis.plot(*zip(*curve), color=color, alpha=0.25, linewidth=0.8)
            steps = sorted({step for curve in curves for step, _ in curve})
            mean = [np.mean([a for curve in curves for st, a in curve if st == step]) for step in steps]
            axis.plot(steps, mean, color=color, linewidth=2.2, label=f"{read}, {schedule}")
        axis.axhline(SUCCESS, color="gray", linestyle=":", linewidth=1)
        axis.set(title=f"{setting}, lr {lr}", xlabel="step", ylabel="validation accuracy", ylim=(0, 1))
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def report(directory):
    """Write report.md, report.json and report_curves.png into ``directory``; returns the Markdown."""
    directory = Path(directory)
    cells = load_cells(directory)
    rows = paired_rows(cells)
    markdown = (f"# Report: {directory.name} (noisy recall)\n\n## Final validation accuracy per cell\n\n"
                + cell_table(cells) + "\n## Seed-paired differences\n\n" + paired_table(rows))
    (directory / "report.md").write_text(markdown)
    summary = {"success_threshold": SUCCESS, "cells": [
        {"setting": k[0], "lr": k[1], "read": k[2], "schedule": k[3],
         "finals": {str(s): v["final"] for s, v in sorted(seeds.items())}} for k, seeds in cells.items()],
        "paired": rows}
    (directory / "report.json").write_text(json.dumps(summary, indent=2))
    plot_curves(cells, directory / "report_curves.png")
    return markdown
