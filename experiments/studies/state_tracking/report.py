"""The state-tracking and copy reports: ``python -m experiments.studies.state_tracking.report DIR``.

Reads every finished run ``{cell}-{arm}-seed{k}`` under DIR (a cell: ``parity``, ``mod3``, ``S3``,
``A5``, ``S5`` or a copy delay ``T100`` …) and writes into DIR ``tracking_report.md`` (per cell the
arms' test accuracy at every test length and their solved seeds; per copy delay the test loss
against the memoryless baseline 10·ln 8/(T + 20)), ``tracking_table.json``/``.csv`` and
``tracking_<cell>.png``. Solved: test accuracy ≥ ``SOLVED_ACCURACY`` at ``SOLVED_FACTOR`` × the
training length. The study mixes two tasks in one directory, which ``experiments.report`` refuses.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from experiments.analysis.plotting import plt
from experiments.analysis.stats import mean_ci
from experiments.cli import CommandParser

SOLVED_ACCURACY = 0.99
SOLVED_FACTOR = 4
ACCURACY = re.compile(r"^test_accuracy@(\d+)$")


def cell_and_arm(name):
    """``parity-rnn-SO-input-seed2`` -> ``("parity", "rnn-SO-input")``."""
    stem = re.sub(r"-seed\d+$", "", name)
    cell, _, arm = stem.partition("-")
    if not arm:
        raise ValueError(f"run name {name!r} is not {{cell}}-{{arm}}-seed{{k}}")
    return cell, arm


def load(directory):
    """``{(cell, arm): [run]}`` over the finished runs under ``directory`` (a run: its ``name``,
    ``config`` (config.json) and ``final`` (final.json)), in name order."""
    groups = defaultdict(list)
    for final in sorted(Path(directory).glob("*/final.json")):
        run = {"name": final.parent.name, "config": json.loads((final.parent / "config.json").read_text()),
               "final": json.loads(final.read_text())}
        groups[cell_and_arm(run["name"])].append(run)
    if not groups:
        raise ValueError(f"no finished runs (*/final.json) under {directory}")
    return dict(groups)


def accuracies(run):
    """``{test length: test accuracy}`` of a length-generalization run."""
    return {int(m.group(1)): value for key, value in run["final"].items() if (m := ACCURACY.match(key))}


def solved(run):
    """Whether ``run`` reaches ``SOLVED_ACCURACY`` at ``SOLVED_FACTOR`` × its training length (False
    when that length was not tested)."""
    length = SOLVED_FACTOR * run["config"]["task"]["train_max_length"]
    return accuracies(run).get(length, -math.inf) >= SOLVED_ACCURACY


def _finite_mean(values):
    values = [v for v in values if np.isfinite(v)]
    return float(np.mean(values)) if values else math.nan


def row(cell, arm, runs):
    """One table row: the figures of an arm on a cell (see the module docstring)."""
    task = runs[0]["config"]["train"]["task"]
    base = {"cell": cell, "arm": arm, "task": task, "model": runs[0]["config"]["train"]["model"],
            "seeds": sorted(r["config"]["train"]["seed"] for r in runs),
            "parameters": sorted({r["final"]["parameters"] for r in runs}),
            "train_seconds": _finite_mean([r["final"].get("train_seconds", math.nan) for r in runs])}
    if task == "copy":
        losses = [r["final"]["test_loss"] for r in runs]
        mean, half = mean_ci(losses)
        baseline = runs[0]["final"]["test_baseline_loss"]
        return {**base, "delay": runs[0]["config"]["task"]["delay"], "test_loss": mean, "test_loss_ci": half,
                "baseline_loss": baseline, "loss_over_baseline": mean / baseline,
                "below_baseline": sum(loss < baseline for loss in losses),
                "recall_accuracy": _finite_mean([r["final"]["test_recall_accuracy"] for r in runs])}
    per_seed = [accuracies(r) for r in runs]
    lengths = sorted(set.intersection(*(set(a) for a in per_seed)))
    return {**base, "train_max_length": runs[0]["config"]["task"]["train_max_length"],
            "accuracy": {length: float(np.mean([a[length] for a in per_seed])) for length in lengths},
            "accuracy_min": {length: float(min(a[length] for a in per_seed)) for length in lengths},
            "accuracy_max": {length: float(max(a[length] for a in per_seed)) for length in lengths},
            "solved": sum(solved(r) for r in runs)}


def rows(groups):
    """Every (cell, arm) row, cells in first-seen order, arms in name order within a cell."""
    cells = list(dict.fromkeys(cell for cell, _ in groups))
    return [row(cell, arm, groups[(cell, arm)]) for cell in cells
            for arm in sorted(arm for c, arm in groups if c == cell)]


def _parameters(row_):
    return ", ".join(f"{p:,}" for p in row_["parameters"])


def markdown_table(cell_rows):
    """The Markdown table of one cell's rows (a length-generalization cell or a copy delay)."""
    if cell_rows[0]["task"] == "copy":
        lines = ["| arm | seeds | parameters | test loss (mean ± 95% CI) | baseline | loss / baseline | "
                 "seeds below baseline | recall accuracy | train s/run |", "|---|---|---|---|---|---|---|---|---|"]
        for r in cell_rows:
            loss = f"{r['test_loss']:.4f} " + (f"± {r['test_loss_ci']:.4f}" if np.isfinite(r["test_loss_ci"])
                                                 else "(one seed)")
            lines.append(f"| {r['arm']} | {len(r['seeds'])} | {_parameters(r)} | {loss} | {r['baseline_loss']:.4f} | "
                         f"{r['loss_over_baseline']:.3f} | {r['below_baseline']}/{len(r['seeds'])} | "
                         f"{r['recall_accuracy']:.3f} | {r['train_seconds']:.0f} |")
        return "\n".join(lines) + "\n"
    lengths = sorted(set().union(*(r["accuracy"] for r in cell_rows)))
    head = " | ".join(f"acc@{length}" for length in lengths)
    lines = [f"| arm | seeds | parameters | {head} | solved (≥ 99% at {SOLVED_FACTOR}× train) | train s/run |",
             "|---|---|---|" + "---|" * len(lengths) + "---|---|"]
    for r in cell_rows:
        accs = " | ".join(f"{r['accuracy'][n]:.3f} [{r['accuracy_min'][n]:.2f}, {r['accuracy_max'][n]:.2f}]"
                          if n in r["accuracy"] else "–" for n in lengths)
        lines.append(f"| {r['arm']} | {len(r['seeds'])} | {_parameters(r)} | {accs} | "
                     f"{r['solved']}/{len(r['seeds'])} | {r['train_seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def plot_cell(cell_rows, path):
    """Test accuracy against test length, one line per arm (mean over seeds)."""
    figure, axis = plt.subplots(figsize=(8, 4.5))
    colors = plt.get_cmap("tab20").colors
    for index, r in enumerate(cell_rows):
        lengths = sorted(r["accuracy"])
        axis.plot(lengths, [r["accuracy"][n] for n in lengths], marker=".", label=r["arm"],
                  color=colors[index % len(colors)], linestyle="-" if index < len(colors) else "--")
    axis.axvline(cell_rows[0]["train_max_length"], color="grey", linewidth=0.8, linestyle=":")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("test length (dotted: longest training length)")
    axis.set_ylabel("test accuracy, all positions (mean over seeds)")
    axis.set_title(cell_rows[0]["cell"])
    axis.legend(fontsize=6, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_copy(copy_rows, path):
    """Copy test loss / memoryless baseline against the delay T, one line per arm (mean over seeds)."""
    figure, axis = plt.subplots(figsize=(8, 4.5))
    colors = plt.get_cmap("tab20").colors
    by_arm = defaultdict(list)
    for r in copy_rows:
        by_arm[r["arm"]].append((r["delay"], r["loss_over_baseline"]))
    for index, (arm, points) in enumerate(sorted(by_arm.items())):
        points.sort()
        axis.plot(*zip(*points), marker=".", label=arm, color=colors[index % len(colors)])
    axis.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    axis.set_xscale("log")
    axis.set_xlabel("delay T")
    axis.set_ylabel("test loss / memoryless baseline (dotted: 1)")
    axis.legend(fontsize=6, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _csv_rows(all_rows):
    for r in all_rows:
        flat = {k: v for k, v in r.items() if not isinstance(v, (dict, list))}
        flat["seeds"] = len(r["seeds"])
        flat["parameters"] = " ".join(str(p) for p in r["parameters"])
        for length, value in r.get("accuracy", {}).items():
            flat[f"accuracy@{length}"] = value
        yield flat


def write_csv(all_rows, path):
    flat = list(_csv_rows(all_rows))
    fields = list(dict.fromkeys(k for r in flat for k in r))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(flat)


def report(directory):
    """Write the report files (module docstring) into ``directory``; returns the Markdown."""
    directory = Path(directory)
    all_rows = rows(load(directory))
    by_cell = defaultdict(list)
    for r in all_rows:
        by_cell[r["cell"]].append(r)
    parts = [f"# State-tracking report: {directory.name}\n",
             f"Accuracy: all positions of the fixed test set, mean over seeds [min, max]. Solved: seeds with "
             f"≥ {SOLVED_ACCURACY:.0%} accuracy at {SOLVED_FACTOR}× the training length.\n"]
    for cell, cell_rows in by_cell.items():
        parts.append(f"## {cell}\n\n" + markdown_table(cell_rows))
        if cell_rows[0]["task"] != "copy":
            plot_cell(cell_rows, directory / f"tracking_{cell}.png")
    copy_rows = [r for r in all_rows if r["task"] == "copy"]
    if copy_rows:
        plot_copy(copy_rows, directory / "tracking_copy.png")
    markdown = "\n".join(parts)
    (directory / "tracking_report.md").write_text(markdown)
    (directory / "tracking_table.json").write_text(json.dumps(all_rows, indent=2))
    write_csv(all_rows, directory / "tracking_table.csv")
    return markdown


def main(argv=None):
    parser = CommandParser("experiments.studies.state_tracking.report", __doc__)
    parser.add_argument("directory", type=Path, help="the sweep's directory (its --out)")
    directory = parser.parse_args(argv).directory
    with parser.refusals():
        load(directory)
    print(report(directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
