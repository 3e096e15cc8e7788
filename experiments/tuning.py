"""The learning-rate search of a sweep that sets ``TUNING`` (an ``experiments.sweep_run.Tuning``).

The search, the choice and the check at full length: ``choose_rates`` and ``settle_rates``.
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


EDGE_STEPS = 3  # with Tuning.extend_edges: at most this many rates past either edge of Tuning.rates


def next_rate(rate, direction):
    """The rate one step above (``direction`` 1) or below (-1) ``rate`` on the ladder 1e-3, 3e-3, 1e-2, ...
    (half a decade a step, rounded to one figure): 3e-2 -> 1e-1, 1e-3 -> 3e-4."""
    return float(f"{10 ** ((round(2 * math.log10(rate)) + direction) / 2):.1g}")


def _search_record(directory):
    """A search run's ``final.json`` as a dict, or None while it has not finished."""
    final = Path(directory) / "final.json"
    return json.loads(final.read_text()) if final.exists() else None


def _finite(score):
    return score if score is not None and math.isfinite(score) else None


def arm_rates(arm, template, tuning, directory=None):
    """The rates ``arm`` is searched at, ascending: ``tuning.rates``, and with ``tuning.extend_edges`` the
    grid extended past its edges. While the arm's best finished rate (lowest validation score under
    ``directory``) is its largest or its smallest, the next rate beyond it (``next_rate``) joins, up to
    ``EDGE_STEPS`` each way; the grid stops growing while one of its runs is unfinished, and where the
    edge's run scored worse or diverged (a rate that diverges stays a finding: nothing is cut)."""
    rates = sorted(tuning.rates)
    while tuning.extend_edges and directory is not None:
        records = [_search_record(Path(directory) / f"{arm}-{rate_label(rate)}") for rate in rates]
        if any(record is None for record in records):
            break
        key = task_class(template.task).selection_key
        scores = {rate: _finite(record.get(key)) for rate, record in zip(rates, records)}
        finite = [rate for rate in rates if scores[rate] is not None]
        if not finite:
            break
        best = min(finite, key=scores.get)
        if best == rates[-1] and sum(rate > max(tuning.rates) for rate in rates) < EDGE_STEPS:
            rates.append(next_rate(best, 1))
        elif best == rates[0] and sum(rate < min(tuning.rates) for rate in rates) < EDGE_STEPS:
            rates.insert(0, next_rate(best, -1))
        else:
            break
    return tuple(rates)


def tuning_runs(runs, tuning, directory=None):
    """The search: one SweepRun per (arm, rate of ``arm_rates``), named ``<arm>-lr<rate>``. With
    ``tuning.extend_edges``, ``directory`` holds the search runs so far: call again after training them,
    until no run is added."""
    return [dataclasses.replace(template, name=f"{arm}-{rate_label(rate)}",
                                options={**template.options, **tuning.options, "lr": rate, "seed": tuning.seed})
            for arm, template in arm_templates(runs).items() for rate in arm_rates(arm, template, tuning, directory)]


def choose_rates(runs, tuning, directory):
    """Per arm, the rate of the search run (finished, under ``directory``) with the lowest score.

    Returns ``{arm: {"lr", "score", "best_step", "rates": the arm's searched rates (``arm_rates``),
    "scores": {rate label: score or None}}}`` for the arms with at least one finished, finite search run; also written to ``chosen_rates.json`` in
    ``directory``'s parent.

    Raises:
        ValueError: the arms' task selects no model (its ``selection_key`` is None).

    The fair recipe: for each arm (a sweep's runs that differ only in the seed),
    train it once per rate of ``Tuning.rates`` (extended past an edge its best rate sits on, with
    ``Tuning.extend_edges``: ``arm_rates``; seed ``Tuning.seed``, the options overridden by
    ``Tuning.options``: a short budget), choose the rate whose run reached the lowest validation
    score (the task's ``selection_key`` at the run's best step: validation only), and train every
    run of the arm at that rate. ``experiments.sweep`` runs the search in ``OUT/tune/``, writes
    ``OUT/chosen_rates.json`` and then runs the sweep in ``OUT``; both stages skip finished runs, so
    the whole recipe resumes, and the choice is recomputed from the finished search runs each time.
    A search at the full budget (``Tuning.options`` empty) with a seed the sweep also runs trains that
    seed's run at the chosen rate already: ``reuse_search_runs`` copies it instead of training it twice.

    With ``Tuning.stability_margin`` the choice is checked at the full length (``settle_rates``): each
    arm's first run trains first, and an arm whose first run diverged parks its runs at that rate in
    ``OUT/diverged/lr<rate>/`` and takes its next-best searched rate, until one trains stably. An arm
    with no stable rate keeps the one whose first run reached the lowest validation score, marked
    ``"stable": false`` in ``chosen_rates.json``.
    """
    directory, chosen = Path(directory), {}
    for arm, template in arm_templates(runs).items():
        key = task_class(template.task).selection_key
        if key is None:
            raise ValueError(f"{arm}: the {template.task} task has no selection_key to tune the learning rate on")
        rates, scores, steps = arm_rates(arm, template, tuning, directory), {}, {}
        for rate in rates:
            record = _search_record(directory / f"{arm}-{rate_label(rate)}") or {}
            scores[rate], steps[rate] = _finite(record.get(key)), record.get("best_step")
        finished = [rate for rate in rates if scores[rate] is not None]
        if finished:
            best = min(finished, key=lambda rate: scores[rate])
            chosen[arm] = {"lr": best, "score": scores[best], "best_step": steps[best], "rates": list(rates),
                           "scores": {rate_label(rate): scores[rate] for rate in rates}}
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


def _retarget_command(source, target):
    """A run directory copied or moved from ``source`` to ``target``: its ``command.txt`` names ``target``."""
    command = Path(target) / "command.txt"
    if command.exists():
        command.write_text(command.read_text().replace(str(source), str(target)))


def reuse_search_runs(runs, tuning, directory, out):
    """Copy every finished search run under ``directory`` that is one of ``runs`` (at their chosen
    rates; the same model, task and options, seed included) to ``out/<run name>``, where that run has
    not started; its ``command.txt`` then names the new directory. Returns the names copied."""
    search = {(r.model, r.task, json.dumps(r.options, sort_keys=True)): r.name
              for r in tuning_runs(runs, tuning, directory)}
    copied = []
    for run in runs:
        name = search.get((run.model, run.task, json.dumps(run.options, sort_keys=True)))
        source, target = Path(directory) / str(name), Path(out) / run.name
        if name is None or not (source / "final.json").exists() or target.exists():
            continue
        shutil.copytree(source, target)
        _retarget_command(source, target)
        copied.append(run.name)
    return copied


DIVERGED = "diverged"  # OUT/diverged/lr<rate>/<run name>: an arm's runs at a rate its first run diverged at
SUPERSEDED = "superseded"  # OUT/superseded/lr<rate>/<run name>: an arm's runs at a rate its search no longer chooses


def diverged(directory, key, margin):
    """Whether the finished run in ``directory`` diverged: its training stopped on a non-finite loss,
    or its last evaluation's ``key`` (in ``metrics.jsonl``) is not finite or above its best + ``margin``."""
    directory = Path(directory)
    if "stopped" in json.loads((directory / "final.json").read_text()):
        return True
    scores = [json.loads(line)[key] for line in (directory / "metrics.jsonl").read_text().splitlines()]
    finite = [score for score in scores if math.isfinite(score)]
    return not finite or not math.isfinite(scores[-1]) or scores[-1] > min(finite) + margin


def _best_score(directory, key):
    """The run's ``final.json`` score (its best-validation model's), infinite when not finite."""
    score = json.loads((Path(directory) / "final.json").read_text()).get(key)
    return score if score is not None and math.isfinite(score) else math.inf


def _move_runs(names, source, target):
    """Move the run directories ``names`` that exist under ``source`` to ``target`` (their commands follow)."""
    for name in names:
        if (Path(source) / name).exists():
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.move(str(Path(source) / name), str(Path(target) / name))
            _retarget_command(Path(source) / name, Path(target) / name)


def _settle_arm(first, names, candidates, out, margin):
    """``(rate, stable)`` for one arm: ``stable`` is True (its first run at ``rate`` trained stably), None
    (that run is still to train or finish) or False (every candidate diverged: ``rate`` scored best).
    Parks the arm's runs (``names``) of a diverged rate; moves back those of the best when none is stable;
    moves aside (``SUPERSEDED``) those of a rate that is no longer the best candidate untried (a rate the
    search added later, past an edge, scored better)."""
    key = task_class(first.task).selection_key
    parked = {rate: out / DIVERGED / rate_label(rate) for rate in candidates}
    tried = {rate for rate, folder in parked.items() if (folder / first.name / "final.json").exists()}
    current = out / first.name
    if (current / "config.json").exists():
        rate = json.loads((current / "config.json").read_text())["train"]["lr"]
        expected = next((r for r in candidates if r not in tried), None)
        if expected is not None and rate != expected:
            _move_runs(names, out, out / SUPERSEDED / rate_label(rate))
            return expected, None
        if not (current / "final.json").exists():
            return rate, None
        if not diverged(current, key, margin):
            return rate, True
        untried = [r for r in candidates if r != rate and r not in tried]
        if not untried and _best_score(current, key) <= min((_best_score(parked[r] / first.name, key) for r in tried),
                                                           default=math.inf):
            return rate, False
        _move_runs(names, out, out / DIVERGED / rate_label(rate))
        parked[rate] = out / DIVERGED / rate_label(rate)
        tried.add(rate)
    untried = [r for r in candidates if r not in tried]
    if untried:
        return untried[0], None
    best = min(tried, key=lambda r: _best_score(parked[r] / first.name, key))
    _move_runs(names, parked[best], out)
    return best, False


def settle_rates(runs, tuning, chosen, out):
    """Check ``chosen`` (``choose_rates``) at the full length; returns the arms' first runs still to train.

    Per arm, the candidates are its searched rates (``choice["rates"]``) with a finite score, best first. The arm's first
    run (at the chosen rate) diverged when ``diverged(..., tuning.stability_margin)``: its runs at
    that rate move to ``out/diverged/lr<rate>/`` and the next candidate is tried. Updates ``chosen``
    in place (``lr``; ``search_lr``, the search's choice; ``stable``: True, False or None while
    pending; ``diverged_rates``) and ``out/chosen_rates.json``. Call it again after training the
    returned runs, until it returns none; it reads every verdict from the run directories, so it
    resumes.
    """
    out, pending = Path(out), []
    names = {}
    for run in runs:
        names.setdefault(arm_of(run.name), []).append(run.name)
    for arm, first in arm_templates(runs).items():
        if arm not in chosen:
            continue
        choice = chosen[arm]
        search_lr = choice.get("search_lr", choice["lr"])
        scores = {rate: choice["scores"][rate_label(rate)] for rate in choice["rates"]}
        candidates = sorted((r for r in scores if scores[r] is not None), key=lambda r: scores[r])
        rate, stable = _settle_arm(first, names[arm], candidates, out, tuning.stability_margin)
        parked = [r for r in candidates if (out / DIVERGED / rate_label(r) / first.name / "final.json").exists()]
        choice.update({"lr": rate, "search_lr": search_lr, "stable": stable, "diverged_rates": parked})
        if stable is None:
            pending.append(dataclasses.replace(first, options={**first.options, "lr": rate}))
    (out / "chosen_rates.json").write_text(json.dumps(chosen, indent=2))
    return pending
