"""Report a sweep or one run: ``python -m experiments.report DIR``.

Reads each finished run under DIR (a directory holding ``final.json``; DIR itself when it is one) with
its ``config.json``; runs whose configs differ only in the seed form an arm (labelled by a run's name
without its ``-seed<k>`` suffix), one run per seed: a second run of the same configuration and seed
(a copy, a duplicate) is named as such and left out of the arm's interval. The runs' task chooses the
report: ``lm_report`` for language modelling, ``experiments.analysis.recall.report`` for noisy
recall, ``metrics_report`` for any other task. Each writes ``report.md`` and its plots into DIR.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from experiments.analysis.plotting import plt
from experiments.analysis import recall as recall_report
from experiments.analysis.stats import format_interval
from experiments.cli import CommandParser
from experiments.sweep_run import arm_of
from experiments.training.config import RunConfig
from experiments.tuning import DIVERGED


def finished_runs(directory):
    """Every finished run under ``directory`` (or ``directory`` itself, if it is one): its name,
    config.json, final.json, metrics.jsonl and whether it was resumed (it has ``resumes.jsonl``)."""
    directory = Path(directory)
    finals = [directory / "final.json"] if (directory / "final.json").exists() else sorted(directory.glob("*/final.json"))
    runs = []
    for final in finals:
        run_dir = final.parent
        metrics = run_dir / "metrics.jsonl"
        runs.append({"name": run_dir.name, "config": json.loads((run_dir / "config.json").read_text()),
                     "final": json.loads(final.read_text()), "resumed": (run_dir / "resumes.jsonl").exists(),
                     "metrics": [json.loads(line) for line in metrics.read_text().splitlines()]
                     if metrics.exists() else []})
    if not runs:
        raise ValueError(f"no finished runs under {directory}: neither {directory / 'final.json'} nor */final.json")
    return runs


def task_of(runs):
    """The one task of ``runs`` (from their configs)."""
    tasks = {run["config"]["train"]["task"] for run in runs}
    if len(tasks) != 1:
        raise ValueError(f"a report covers one task; these runs have {sorted(tasks)}")
    return tasks.pop()


def without_seed(config):
    """A run's config without its seed: what its arm shares. A field its config.json does not record
    (the run predates it) counts at its default, which the run trained with; the world size is left
    out (N processes train what one does). A config this library cannot rebuild (of a model or
    field since renamed) is compared as recorded."""
    try:
        config = RunConfig.from_json(config).to_json()
    except (KeyError, TypeError, ValueError):
        config = {key: value for key, value in config.items() if key != "world_size"}
    return json.dumps({**config, "train": {k: v for k, v in config["train"].items() if k != "seed"}}, sort_keys=True)


def load_runs(directory):
    """``{arm: [run]}``: runs grouped by their config without the seed, labelled by ``arm_of`` the first
    name, one run per seed (the first by name); each run's ``duplicates`` names the others of its seed."""
    groups = defaultdict(dict)
    for run in finished_runs(directory):
        seeds = groups[without_seed(run["config"])]
        seed = run["config"]["train"]["seed"]
        if seed in seeds:
            seeds[seed]["duplicates"].append(run["name"])
        else:
            seeds[seed] = {**run, "duplicates": []}
    return {arm_of(next(iter(runs.values()))["name"]): list(runs.values()) for runs in groups.values()}


def runs_cell(runs):
    """The table's count of an arm's runs (one per seed), with how many were resumed."""
    resumed = sum(run.get("resumed", False) for run in runs)
    return f"{len(runs)}" + (f" ({resumed} resumed)" if resumed else "")


def duplicates_note(arms):
    """A line naming the runs left out as duplicates of another of their seed, or ``""``."""
    left_out = [f"{', '.join(run['duplicates'])} (seed {run['config']['train']['seed']} of {run['name']})"
                for runs in arms.values() for run in runs if run.get("duplicates")]
    return f"\nLeft out as duplicates (the configuration and seed of a run above): {'; '.join(left_out)}.\n" \
        if left_out else ""


NOT_CONVERGED = "†"


def learning_rates(runs):
    """The learning rates ``runs`` trained at (their ``config.json``), sorted, each once."""
    return sorted({run["config"]["train"]["lr"] for run in runs})


def best_steps(runs):
    """The runs' best steps, ``NOT_CONVERGED`` after one that is its run's last evaluation; a run that
    a non-finite loss stopped (``final["stopped"]``) says so; "—": no finite evaluation."""
    cells = []
    for run in runs:
        final = run["final"]
        best, last = final.get("best_step"), final["steps"]
        if "stopped" in final:
            cells.append(f"{'—' if best is None else f'{best:,}'} (NaN at step {last + 1:,})")
        else:
            cells.append("—" if best is None else f"{best:,}{NOT_CONVERGED if best == last else ''}")
    return ", ".join(cells)


def table(arms, speed=None):
    """The runs' table. ``speed``: ``{arm: tokens/s}`` measured quietly (``experiments.bench.study_speed``)
    replaces the mean of the runs' own tokens/s, which were measured beside other runs."""
    lines = ["| arm | runs | parameters | lr | best step | test bits/token (mean ± 95% CI) | "
             "test bits/token, state carried | tokens/s | train time (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        interval = format_interval([r["final"]["test_bits_per_token"] for r in runs])
        carried = [r["final"].get("test_carried_bits_per_token") for r in runs]
        carried = format_interval(carried) if None not in carried else "—"
        parameters = sorted({r["final"]["parameters"] for r in runs})
        rates = learning_rates(runs)
        tokens_per_second = (speed or {}).get(arm, np.mean([r["final"]["tokens_per_second"] for r in runs]))
        seconds = np.mean([r["final"].get("train_seconds", np.nan) for r in runs])
        lines.append(f"| {arm} | {runs_cell(runs)} | {', '.join(f'{p:,}' for p in parameters)} | "
                     f"{', '.join(f'{r:g}' for r in rates)} | {best_steps(runs)} | {interval} | {carried} | "
                     f"{tokens_per_second:,.0f} | {seconds:,.0f} |")
    lines.append(f"\nBest step: the evaluation with the lowest validation bits, whose model is tested; "
                 f"{NOT_CONVERGED} marks a run whose best step is its last evaluation (not converged). Tokens/s: "
                 + ("training alone on one thread (speed.json)" if speed else "the runs' own, beside other runs")
                 + "; a resumed run's train time sums every part of it.")
    return "\n".join(lines) + "\n" + duplicates_note(arms)


def stability_cell(choice):
    """The full-length check of a rate choice (``experiments.tuning.settle_rates``), in words."""
    if "stable" not in choice:
        return "not checked"
    parked = ", ".join(f"{rate:g}" for rate in choice["diverged_rates"])
    if choice["stable"] is None:
        return "pending"
    if choice["stable"]:
        return f"diverged at {parked}; stable at {choice['lr']:g}" if parked else "stable"
    return f"no stable rate (diverged at {', '.join(f'{r:g}' for r in sorted({*choice['diverged_rates'], choice['lr']}))})"


def rates_table(chosen):
    """The learning-rate search (``chosen_rates.json``): validation score per arm and rate, the rate used in
    bold, and its full-length check."""
    labels = sorted({label for choice in chosen.values() for label in choice["scores"]},
                    key=lambda label: float(label.removeprefix("lr")))  # every arm's rates (some searched past an edge)
    lines = ["| arm | " + " | ".join(labels) + " | used | full-length check |", "|---|" + "---|" * (len(labels) + 2)]
    for arm, choice in chosen.items():
        scores = choice["scores"]
        cells = ["—" if label not in scores else "diverged" if scores[label] is None else f"{scores[label]:.4f}"
                 for label in labels]
        cells = [f"**{cell}**" if label == f"lr{choice['lr']:g}" else cell for label, cell in zip(labels, cells)]
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {choice['lr']:g} | {stability_cell(choice)} |")
    return "\n".join(lines) + "\n"


DYNAMICS_PANELS = (  # (title, keys, log scale)
    ("‖A_t‖₂ (rotation per step)", ("dyn_rotation_mean", "dyn_rotation_max"), False),
    ("‖c_t‖ and its terms", ("dyn_drive_norm", "dyn_input_norm", "dyn_state_norm"), False),
    ("Re tr(H_tᴴH_{t+k})/n", ("dyn_similarity@1", "dyn_similarity@10"), False),
    ("gradient norm before clipping", "grad_norm_", True),
    ("readout weight norm", ("dyn_readout_norm",), False),
    ("bits per token", ("train_bits", "valid_bits"), False))


def seed_mean(runs, key):
    """``(steps, values)``: ``key`` averaged over the runs, at the steps every run recorded it (a run
    that a NaN stopped early ends the mean where it ends)."""
    recorded = [{m["step"]: m[key] for m in r["metrics"] if key in m} for r in runs]
    steps = sorted(set.intersection(*(set(r) for r in recorded))) if recorded else []
    return steps, [float(np.mean([r[s] for r in recorded])) for s in steps]


def plot_seeds(axis, runs, key, log=False, **style):
    """Draw ``key``'s mean over the runs (``seed_mean``) and, thinner, each run's own curve past the
    mean's last step (a run that trained on after another stopped). ``log``: leave out values ≤ 0,
    which a log axis cannot show. ``style``: ``Axes.plot`` keywords."""
    def shown(points):
        return [(s, v) for s, v in points if v > 0 or not log]

    steps, values = seed_mean(runs, key)
    mean = shown(zip(steps, values))
    end = steps[-1] if steps else -np.inf
    tails = [shown((m["step"], m[key]) for m in r["metrics"] if key in m and m["step"] >= end) for r in runs]
    tails = [tail for tail in tails if len(tail) > 1 or (tail and not mean)]
    if mean:
        style["color"] = axis.plot(*zip(*mean), marker=".", **style)[0].get_color()
        style.pop("label", None)
    for tail in tails:
        style["color"] = axis.plot(*zip(*tail), marker=".", markersize=2, linewidth=0.7, alpha=0.6,
                                   **style)[0].get_color()
        style.pop("label", None)


def plot_stability(arms, parked, path):
    """Per arm with runs parked by the stability check (``experiments.tuning.settle_rates``), its
    validation curve at the rate it uses and at each rate it diverged at, mean over seeds.

    ``parked``: ``{rate label: {arm: [run]}}`` read from ``diverged/<rate label>/``."""
    shown = [arm for arm in arms if any(arm in by_arm for by_arm in parked.values())]
    figure, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown), 3.6), squeeze=False)
    for axis, arm in zip(axes.flat, shown):
        rate = learning_rates(arms[arm])
        plot_seeds(axis, arms[arm], "valid_bits", label=f"lr {', '.join(f'{x:g}' for x in rate)} (used)")
        for label, by_arm in sorted(parked.items()):
            if arm in by_arm:
                plot_seeds(axis, by_arm[arm], "valid_bits", linestyle="--",
                           label=f"{label.removeprefix('lr')} (diverged; {len(by_arm[arm])} runs)")
        axis.set_title(arm, fontsize=9)
        axis.set_xlabel("step", fontsize=8)
        axis.set_ylabel("validation bits per token", fontsize=8)
        axis.legend(fontsize=7)
    figure.suptitle("the stability check: the rate used and the rates parked under diverged/ (mean over seeds)",
                    fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_dynamics(arm, runs, path):
    """One figure of an arm's training dynamics (``experiments.analysis.diagnostics``), mean over its seeds."""
    figure, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for axis, (title, keys, log) in zip(axes.flat, DYNAMICS_PANELS):
        present = {k for r in runs for m in r["metrics"] for k in m}
        keys = sorted(k for k in present if k.startswith(keys)) if isinstance(keys, str) else keys
        for key in keys:
            plot_seeds(axis, runs, key, label=key.removeprefix("dyn_").removeprefix("grad_norm_"))
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("step", fontsize=8)
        if log and axis.lines:
            axis.set_yscale("log")
        if axis.lines:
            axis.legend(fontsize=7)
    figure.suptitle(f"{arm}: training dynamics (mean over {len(runs)} seed{'s' if len(runs) > 1 else ''})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot(arms, key, ylabel, path, log=False):
    figure, axis = plt.subplots(figsize=(7, 4))
    colors = plt.get_cmap("tab20").colors  # 20 distinct colors: a study has more than ten arms
    for index, (arm, runs) in enumerate(arms.items()):
        plot_seeds(axis, runs, key, log=log, label=arm, color=colors[index % len(colors)],
                   linestyle="-" if index < len(colors) else "--")
    axis.set_xlabel("step")
    axis.set_ylabel(ylabel)
    if log and axis.lines:
        axis.set_yscale("log")
    if axis.lines:
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def report(directory):
    """Write the report of the runs' task into ``directory``; returns the Markdown."""
    return REPORTS.get(task_of(finished_runs(directory)), metrics_report)(Path(directory))


def lm_report(directory):
    """Write report.md and the plots of a language-modelling sweep into ``directory``; returns the Markdown.

    ``report.md`` gives per arm the runs, parameters, learning rate, each run's best step (flagged when
    it is the run's last evaluation: not converged), test bits per token of the best-validation model
    as mean ± 95% t-interval over seeds (windowed, and with the state carried across the split for
    recurrent models), tokens/s and training wall time, then the learning-rate search when the sweep
    had one (``chosen_rates.json``). Beside it: ``report_curves.png`` and ``report_drift.png``
    (validation bits and state drift against the step, mean over seeds) and, for each group-RNN arm,
    ``report_dynamics_<arm>.png`` (its training dynamics, ``experiments.analysis.diagnostics``).
    """
    arms = load_runs(directory)
    speed = directory / "speed.json"
    speed = {arm: record["tokens_per_second"] for arm, record in json.loads(speed.read_text())["arms"].items()} \
        if speed.exists() else None
    markdown = f"# Report: {directory.name}\n\n" + table(arms, speed)
    chosen = directory / "chosen_rates.json"
    if chosen.exists() and json.loads(chosen.read_text()):
        markdown += ("\n## Learning-rate search\n\nValidation bits per token at each arm's best step, one seed "
                     "(runs in tune/); the full-length check trains the arm's first run at the rate and moves a "
                     "diverged arm to its next rate (its runs in diverged/):\n\n" + rates_table(json.loads(chosen.read_text())))
    (directory / "report.md").write_text(markdown)
    plot(arms, "valid_bits", "validation bits per token (mean over seeds)", directory / "report_curves.png")
    plot(arms, "drift", "max |xᴴx − I| of group-valued parameters", directory / "report_drift.png", log=True)
    for arm, runs in arms.items():
        if any(key.startswith("dyn_") for r in runs for m in r["metrics"] for key in m):
            plot_dynamics(arm, runs, directory / f"report_dynamics_{arm}.png")
    parked = {folder.name: load_runs(folder) for folder in sorted((directory / DIVERGED).glob("lr*"))
              if any(folder.glob("*/final.json"))}
    if parked:
        plot_stability(arms, parked, directory / "report_stability.png")
    return markdown


def metrics_table(arms):
    """Per arm, every numeric ``final.json`` value shared by its runs as mean ± 95% CI over seeds."""
    keys = [k for k, v in next(iter(arms.values()))[0]["final"].items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "steps"]
    lines = ["| arm | runs | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for arm, runs in arms.items():
        cells = [format_interval([float(r["final"].get(k, np.nan)) for r in runs]) for k in keys]
        lines.append(f"| {arm} | {runs_cell(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + duplicates_note(arms)


def metrics_report(directory):
    """The report of a task without its own: ``metrics_table`` and one plot per validation metric."""
    arms = load_runs(directory)
    markdown = f"# Report: {directory.name}\n\n" + metrics_table(arms)
    (directory / "report.md").write_text(markdown)
    first = next(iter(arms.values()))[0]["metrics"]
    for key in sorted({k for record in first for k in record if k.startswith("valid_")}):
        plot(arms, key, f"{key} (mean over seeds)", directory / f"report_{key}.png")
    return markdown


REPORTS = {"lm": lm_report, "recall": recall_report.report}  # other tasks: metrics_report


def main(argv=None):
    parser = CommandParser("experiments.report", __doc__)
    parser.add_argument("directory", type=Path, help="the sweep's directory (its --out), or one run's")
    args = parser.parse_args(argv)
    with parser.refusals():
        finished_runs(args.directory)
    print(report(args.directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
