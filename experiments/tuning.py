"""The learning-rate search of a sweep that sets ``TUNING`` (an ``experiments.sweep_run.Tuning``).

The fair recipe of issue 13 item 4: for each arm (a sweep's runs that differ only in the seed),
train it once per rate of ``Tuning.rates`` (seed ``Tuning.seed``, the options overridden by
``Tuning.options``: a short budget), choose the rate whose run reached the lowest validation
score (the task's ``selection_key`` at the run's best step: validation only), and train every
run of the arm at that rate. ``experiments.sweep`` runs the search in ``OUT/tune/``, writes
``OUT/chosen_rates.json`` and then runs the sweep in ``OUT``; both stages skip finished runs, so
the whole recipe resumes, and the choice is recomputed from the finished search runs each time.
A search at the full budget (``Tuning.options`` empty) with a seed the sweep also runs trains that
seed's run at the chosen rate already: ``reuse_search_runs`` copies it instead of training it twice.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

from experiments.sweep_run import arm_of
from experiments.tasks import task_class


def arm_templates(runs):
    """``{arm: its first run}`` in the sweep's order."""
    templates = {}
    for run in runs:
        templates.setdefault(arm_of(run.name), run)
    return templates


def rate_label(rate):
    """``0.0003`` -> ``lr0.0003``: the suffix of a search run's name."""
    return f"lr{rate:g}"


def tuning_runs(runs, tuning):
    """The search: one SweepRun per (arm, rate), named ``<arm>-lr<rate>``."""
    return [dataclasses.replace(template, name=f"{arm}-{rate_label(rate)}",
                                options={**template.options, **tuning.options, "lr": rate, "seed": tuning.seed})
            for arm, template in arm_templates(runs).items() for rate in tuning.rates]


def choose_rates(runs, tuning, directory):
    """Per arm, the rate of the search run (finished, under ``directory``) with the lowest score.

    Returns ``{arm: {"lr", "score", "best_step", "scores": {rate label: score or None}}}`` for the
    arms with at least one finished, finite search run; also written to ``chosen_rates.json`` in
    ``directory``'s parent.

    Raises:
        ValueError: the arms' task selects no model (its ``selection_key`` is None).
    """
    directory, chosen = Path(directory), {}
    for arm, template in arm_templates(runs).items():
        key = task_class(template.task).selection_key
        if key is None:
            raise ValueError(f"{arm}: the {template.task} task has no selection_key to tune the learning rate on")
        scores, steps = {}, {}
        for rate in tuning.rates:
            final = directory / f"{arm}-{rate_label(rate)}" / "final.json"
            record = json.loads(final.read_text()) if final.exists() else {}
            score = record.get(key)
            scores[rate] = score if score is not None and math.isfinite(score) else None
            steps[rate] = record.get("best_step")
        finished = [rate for rate in tuning.rates if scores[rate] is not None]
        if finished:
            best = min(finished, key=lambda rate: scores[rate])
            chosen[arm] = {"lr": best, "score": scores[best], "best_step": steps[best],
                           "scores": {rate_label(rate): scores[rate] for rate in tuning.rates}}
    (directory.parent / "chosen_rates.json").write_text(json.dumps(chosen, indent=2))
    return chosen


def with_chosen_rates(runs, chosen):
    """``(runs at their arm's chosen rate, names of runs whose arm has none)``."""
    tuned, untuned = [], []
    for run in runs:
        arm = arm_of(run.name)
        if arm in chosen:
            tuned.append(dataclasses.replace(run, options={**run.options, "lr": chosen[arm]["lr"]}))
        else:
            untuned.append(run.name)
    return tuned, untuned


def reuse_search_runs(runs, tuning, directory, out):
    """Copy every finished search run under ``directory`` that is one of ``runs`` (at their chosen
    rates; the same model, task and options, seed included) to ``out/<run name>``, where that run has
    not started; its ``command.txt`` then names the new directory. Returns the names copied."""
    search = {(r.model, r.task, json.dumps(r.options, sort_keys=True)): r.name for r in tuning_runs(runs, tuning)}
    copied = []
    for run in runs:
        name = search.get((run.model, run.task, json.dumps(run.options, sort_keys=True)))
        source, target = Path(directory) / str(name), Path(out) / run.name
        if name is None or not (source / "final.json").exists() or target.exists():
            continue
        shutil.copytree(source, target)
        command = target / "command.txt"
        if command.exists():
            command.write_text(command.read_text().replace(str(source), str(target)))
        copied.append(run.name)
    return copied
