"""The verdict of the v2 character-level study on the paper's three claims.

    python -m experiments.studies.charlm_v2.claims [DIR]

reads DIR (default ``experiments/results/charlm_v2``: one finished sweep of ``recipe`` per dataset,
``tinyshakespeare/`` and ``ptb_char/``) and writes ``DIR/claims.md`` and ``DIR/claims.json``: the
seed-paired comparisons of ``COMPARISONS`` with 95% intervals, each dataset's checks (unigram and
n-gram levels, last against best validation, best steps), the longer-training runs and the probes
outside the study. What each table holds: ``claims``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from experiments.cli import CommandParser
from experiments.data import load_dataset
from experiments.analysis.plotting import plt
from experiments.report import NOT_CONVERGED, best_steps, learning_rates, load_runs, plot_seeds
from experiments.analysis.stats import TEST_SCORES, paired

DEFAULT_DIR = Path("experiments/results/charlm_v2")
DATASET_FOLDERS = {"tinyshakespeare": "Tiny Shakespeare", "ptb_char": "Penn Treebank characters"}
GROUP_ARMS = ("rnn-O", "rnn-O-naware", "rnn-O16-naware", "rnn-O-mix-scalar", "rnn-U", "rnn-T", "rnn-BO", "transformer-O")
COMPACT_RNN_ARMS = tuple(arm for arm in GROUP_ARMS if arm.startswith("rnn-"))
CLAIM_1 = "1. competitive with matched baselines"
CLAIM_2 = "2. better than the unconstrained GL"
CLAIM_3 = "3. mixing adds 2–3% relative"
COMPARISONS = (  # (what it tests, arm a, arm b): a − b
    *((CLAIM_1, arm, baseline) for baseline in ("lstm", "gpt") for arm in GROUP_ARMS),
    (CLAIM_2, "rnn-O", "rnn-GL"), (CLAIM_2, "rnn-O-naware", "rnn-GL"),
    (CLAIM_3, "rnn-O-mix-scalar", "rnn-O-naware"),
    ("the n-aware map rates", "rnn-O-naware", "rnn-O"),
    ("the O shape: n = 16, wide embedding", "rnn-O16-naware", "rnn-O-naware"))
PROBES = {"o_width": "the O shape: n and the embedding width", "tb_width": "T and BO with a wider embedding",
          "bound": "T and BO with every step's angles bounded (update_bound; without it: the control)",
          "rate": "a study arm at another rate of the search's grid, trained the full length"}
PROBE_BASELINES = ("rnn-U", "lstm", "gpt")  # after the arm a probe reshapes: the best group arm, the baselines
PROBE_FIGURE = "curves.png"  # in each probe folder: its arms over training beside the study arms they reshape
PROBE_CURVES = (("valid_bits", "validation bits per character"),
                ("dyn_rotation_mean", "rotation per step ‖A_t‖₂, mean over positions (rad)"))
RESHAPED = re.compile(r"^(?P<model>rnn-[A-Z]+)(?P<shape>\d+-e\d+)(?P<variant>(?:-[a-z]+)*?)"
                      r"(?P<bound>-bound[0-9.]+)?-lr[0-9.e+-]+$")


def _probe_name(probe):
    match = RESHAPED.match(probe)
    if match is None:
        raise ValueError(f"a probe arm is named <arm><n>-e<width>[-variant][-bound<θ>]-lr<rate>, not {probe!r}")
    return match


def reshaped_arm(probe):
    """The study arm a probe arm reshapes: ``rnn-O22-e225-naware-lr0.001`` -> ``rnn-O-naware``,
    ``rnn-T189-e160-lr0.01`` -> ``rnn-T``; ValueError for a name not of that form."""
    match = _probe_name(probe)
    return match["model"] + match["variant"]


def probe_shape(probe):
    """The shape a probe arm gives its study arm, with its update bound if it has one:
    ``rnn-O23-e128-mix-scalar-lr0.001`` -> ``O23-e128``, ``rnn-T207-e32-bound3.1416-lr0.01`` ->
    ``T207-e32-bound3.1416``."""
    match = _probe_name(probe)
    return match["model"].removeprefix("rnn-") + match["shape"] + (match["bound"] or "")


def unigram_bits(train, test, vocab_size):
    """Cross-entropy in bits of the add-one smoothed training frequencies on ``test``:
    −mean_t log2 p(x_t), p(v) = (count_train(v) + 1) / (len(train) + vocab_size); the order-1
    ``ngram_bits`` with strength ``vocab_size``."""
    return ngram_bits(train, test, vocab_size, 1, vocab_size)


def ngram_bits(train, test, vocab_size, order, strength):
    """Cross-entropy in bits on ``test`` (from its ``order``-th token on) of an n-gram count model of
    ``train`` with interpolated Dirichlet smoothing: p_1 uniform-smoothed unigram frequencies, then
    p_k(x | c) = (count(c x) + strength · p_{k−1}(x | c′)) / (count(c) + strength), c the k − 1
    preceding tokens and c′ its last k − 2."""
    train, test = np.asarray(train, dtype=np.int64), np.asarray(test, dtype=np.int64)
    if train.size == 0 or test.size == 0:
        raise ValueError("n-gram levels need non-empty train and test streams")
    if min(train.min(), test.min()) < 0 or max(train.max(), test.max()) >= vocab_size:
        raise ValueError(f"token ids must lie in [0, {vocab_size})")
    if order < 1 or len(test) < order or len(train) < order:
        raise ValueError(f"order {order} needs order ≥ 1 and streams at least that long")
    targets = test[order - 1:]
    probability = np.full(len(targets), 1.0 / vocab_size)
    for k in range(1, order + 1):
        def codes(stream, k=k):  # each k-gram ending at positions k−1 … as one integer, base vocab_size
            windows = np.lib.stride_tricks.sliding_window_view(stream, k)
            return windows @ (vocab_size ** np.arange(k - 1, -1, -1, dtype=np.int64))
        grams, contexts = codes(train), codes(train) // vocab_size
        tested = codes(test[order - k:])
        gram_count = _lookup(np.unique(grams, return_counts=True), tested)
        context_count = _lookup(np.unique(contexts, return_counts=True), tested // vocab_size)
        probability = (gram_count + strength * probability) / (context_count + strength)
    return float(-np.log2(probability).mean())


def _lookup(table, keys):
    """The counts of ``keys`` in ``table`` = (sorted unique values, their counts); 0 where absent."""
    values, counts = table
    index = np.clip(np.searchsorted(values, keys), 0, len(values) - 1)
    return np.where(values[index] == keys, counts[index], 0)


NGRAM_ORDERS = (2, 3, 4, 5)
NGRAM_STRENGTHS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


def ngram_levels(dataset, vocab_size):
    """``{order: {"strength", "valid_bits", "test_bits"}}``: each n-gram model of ``NGRAM_ORDERS``
    with its smoothing strength chosen on the validation split, scored on test."""
    levels = {}
    for order in NGRAM_ORDERS:
        scores = {s: ngram_bits(dataset.streams["train"], dataset.streams["valid"], vocab_size, order, s)
                  for s in NGRAM_STRENGTHS}
        strength = min(scores, key=scores.get)
        levels[order] = {"strength": strength, "valid_bits": scores[strength],
                         "test_bits": ngram_bits(dataset.streams["train"], dataset.streams["test"], vocab_size,
                                                 order, strength)}
    return levels


def comparisons(arms, which=COMPARISONS):
    """Every comparison of ``which`` ((what it tests, arm a, arm b), ...) whose arms both have runs,
    windowed and carried."""
    rows = []
    for claim, first, second in which:
        scores = {mode: paired(arms, first, second, key) for mode, key in TEST_SCORES.items()}
        if scores["windowed"] is not None:
            rows.append({"claim": claim, "comparison": f"{first} − {second}", **scores})
    return rows


def probe_comparisons(folder, arms):
    """``{probe folder: rows}``: each ``PROBES`` folder under ``folder`` with finished runs, each of its arms
    − the arm it reshapes, then − each of ``PROBE_BASELINES``, then each of ``COMPARISONS`` whose two arms
    both have probes at one shape, between those probes (``at_one_shape``); as ``comparisons`` rows (the
    probe's runs joined to ``arms``). Also draws each folder's ``PROBE_FIGURE`` (``plot_probes``)."""
    found = {}
    for name, what in PROBES.items():
        if not any((Path(folder) / name).glob("*/final.json")):
            continue
        probes = load_runs(Path(folder) / name)
        which = [(what, probe, study) for probe in sorted(probes)
                 for study in dict.fromkeys((reshaped_arm(probe), *PROBE_BASELINES))]
        found[name] = comparisons({**arms, **probes}, which + at_one_shape(probes, arms))
        plot_probes(probes, arms, Path(folder) / name / PROBE_FIGURE)
    return found


def at_one_shape(probes, arms):
    """Each study comparison (claim, a, b) of ``COMPARISONS`` repeated between the probes that give arms a
    and b one shape: ``[("<claim>, at <shape>", probe of a, probe of b), ...]``, by shape. A probe trained
    at another rate than its study arm's (in ``arms``) probes the rate, not the shape, and is left out."""
    by_shape = {}
    for probe in sorted(probes):
        arm = reshaped_arm(probe)
        if arm in arms and learning_rates(probes[probe]) != learning_rates(arms[arm]):
            continue
        by_shape.setdefault(probe_shape(probe), {}).setdefault(arm, []).append(probe)
    return [(f"{claim}, at {shape}", first, second) for shape, reshaped in by_shape.items()
            for claim, a, b in COMPARISONS for first in reshaped.get(a, []) for second in reshaped.get(b, [])]


def _last_and_rise(run):
    """``(last validation bits, its rise above the run's best)`` from ``metrics.jsonl``: None without
    evaluations; NaN for a run that a non-finite loss stopped (it ended diverged), a rise of NaN
    without a finite evaluation."""
    valid = [m["valid_bits"] for m in run.get("metrics", []) if "valid_bits" in m]
    finite = [v for v in valid if math.isfinite(v)]
    if not valid:
        return None, None
    if "stopped" in run["final"]:
        return math.nan, math.nan
    return valid[-1], (valid[-1] - min(finite) if finite else math.nan)


def checks(arms, unigram, valid_unigram):
    """Per arm: its seeds' worst test bits (inf where one diverged) against the unigram level (test
    split); where training ended, each seed's last validation bits against the validation split's
    unigram level, with its rise above the run's best; and its best steps."""
    rows = {}
    for arm, runs in arms.items():
        worst = max(v if math.isfinite(v) else math.inf for v in (r["final"]["test_bits_per_token"] for r in runs))
        last, rise = zip(*(_last_and_rise(run) for run in runs))
        rows[arm] = {"worst_test_bits": worst, "below_unigram": bool(math.isfinite(worst) and worst < unigram),
                     "last_valid_bits": list(last), "rise_from_best": list(rise),
                     "ends_below_unigram": all(v is not None and math.isfinite(v) and v < valid_unigram for v in last),
                     "best_steps": [run["final"].get("best_step") for run in runs],
                     "steps": [run["final"]["steps"] for run in runs]}
    return rows


def _interval(result, percent=False):
    if result is None:
        return "—"
    mean, half = ((result["relative_percent"], result["relative_half_width"]) if percent
                  else (result["difference"], result["half_width"]))
    unit, digits = ("%", 2) if percent else ("", 4)
    return f"{mean:+.{digits}f}{unit} ± {half:.{digits}f}{unit}" if math.isfinite(half) \
        else f"{mean:+.{digits}f}{unit} (one seed)"


def _ending(check):
    """The worst seed's last validation bits and the largest rise above a run's best, in words."""
    if None in check["last_valid_bits"]:
        return "—"
    last = max(v if math.isfinite(v) else math.inf for v in check["last_valid_bits"])
    rises = [r for r in check["rise_from_best"] if math.isfinite(r)]
    return ("not finite" if math.isinf(last) else f"{last:.4f}") + (f" (+{max(rises):.3f})" if rises else "")


def comparison_lines(rows, first_column="claim"):
    """``comparisons`` rows as a Markdown table."""
    lines = [f"| {first_column} | a − b | seeds | Δ test bits, windowed | relative | Δ test bits, state carried "
             "| relative |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['claim']} | {row['comparison']} | {len(row['windowed']['seeds'])} | "
                     f"{_interval(row['windowed'])} | {_interval(row['windowed'], True)} | "
                     f"{_interval(row['carried'])} | {_interval(row['carried'], True)} |")
    return lines


def dataset_markdown(title, unigram, valid_unigram, levels, rows, arm_checks, arms):
    counted = ", ".join(f"{order}-gram {level['test_bits']:.3f}" for order, level in levels.items())
    lines = [f"## {title}", "", f"Count models on test, in bits per character: unigram (training frequencies, "
             f"add-one) {unigram:.3f} (on validation {valid_unigram:.3f}); {counted} (interpolated Dirichlet "
             "smoothing, its strength chosen on validation).", "", *comparison_lines(rows)]
    lines += ["", "| arm | worst seed's test bits | below the unigram? | last validation bits, worst seed "
              "(largest rise above a run's best) | ends below the unigram? | best steps |", "|---|---|---|---|---|---|"]
    for arm, check in arm_checks.items():
        lines.append(f"| {arm} | {check['worst_test_bits']:.4f} | {'yes' if check['below_unigram'] else 'NO'} | "
                     f"{_ending(check)} | {'yes' if check['ends_below_unigram'] else 'NO'} | {best_steps(arms[arm])} |")
    return "\n".join(lines) + "\n"


LONGER = re.compile(r"^(?P<arm>.+?)(?:-lr[0-9.e+-]+?)?-steps(?P<steps>\d+)-seed(?P<seed>\d+)$")


def longer_training(folder):
    """The convergence check: runs under ``folder/convergence/`` named ``<arm>-steps<N>-seed<s>`` or
    ``<arm>-lr<rate>-steps<N>-seed<s>`` (the study's run ``<arm>-seed<s>`` trained N steps, at the study's
    rate or another), beside that study run. Returns ``{(arm, seed): [{"lr", "steps", "best_step",
    "valid_bits", "test_bits"}, ...]}``: the runs at the study run's rate by increasing steps, then those at
    other rates by rate and steps; only where the study run finished. The rate is read from each run's
    ``config.json``."""
    found = {}
    for final in sorted(Path(folder).glob("convergence/*/final.json")):
        match = LONGER.match(final.parent.name)
        study = Path(folder) / f"{match['arm']}-seed{match['seed']}" / "final.json" if match else None
        if study is None or not study.exists():
            continue
        found.setdefault((match["arm"], int(match["seed"])), [study]).append(final)
    rows = {}
    for key, finals in found.items():
        records = [{"lr": json.loads(path.with_name("config.json").read_text())["train"]["lr"],
                    **json.loads(path.read_text())} for path in finals]
        study_lr = records[0]["lr"]
        rows[key] = sorted(({"lr": r["lr"], "steps": r["steps"], "best_step": r.get("best_step"),
                             "valid_bits": r["valid_bits"], "test_bits": r["test_bits_per_token"]} for r in records),
                           key=lambda r: (r["lr"] != study_lr, r["lr"], r["steps"]))
    return rows


def longer_markdown(rows):
    """The convergence check as a table, with the change in test bits from the run above at the same rate
    (for the first run at another rate, from the study's run)."""
    lines = ["", "Longer training (the study's run, trained for more steps at its rate or another; `convergence/`):",
             "", "| arm | seed | rate | steps | best step | validation bits | test bits | Δ test from the run above at "
                 "the same rate (or the study's run) |", "|---|---|---|---|---|---|---|---|"]
    for (arm, seed), runs in rows.items():
        previous = {}
        for index, run in enumerate(runs):
            before = previous.get(run["lr"], runs[0] if index else None)
            change = "" if before is None else f"{run['test_bits'] - before['test_bits']:+.4f}"
            lines.append(f"| {arm} | {seed} | {run['lr']:g} | {run['steps']:,} | {run['best_step']:,} | "
                         f"{run['valid_bits']:.4f} | {run['test_bits']:.4f} | {change} |")
            previous[run["lr"]] = run
    return "\n".join(lines) + "\n"


def probes_markdown(found):
    """Each probe folder's comparisons as a table of its own."""
    lines = []
    for name, rows in found.items():
        lines += ["", f"Outside the study (`{name}/`, not a study arm; its runs paired by seed with the study's; "
                  f"curves: `{name}/{PROBE_FIGURE}`):", "", *comparison_lines(rows, "probe")]
    return "\n".join(lines) + "\n"


def plot_probes(probes, arms, path):
    """Each probe arm (solid) and each study arm it reshapes (dashed) over training, mean over seeds:
    validation bits and the rotation per step (``PROBE_CURVES``)."""
    shown = {**{f"{arm} (study)": arms[arm] for arm in dict.fromkeys(map(reshaped_arm, sorted(probes))) if arm in arms},
             **{probe: probes[probe] for probe in sorted(probes)}}
    colors = plt.get_cmap("tab20").colors
    figure, axes = plt.subplots(1, len(PROBE_CURVES), figsize=(6.5 * len(PROBE_CURVES), 4.5))
    for axis, (key, label) in zip(axes, PROBE_CURVES):
        for index, (name, runs) in enumerate(shown.items()):
            plot_seeds(axis, runs, key, label=f"{name} ({len(runs)})", color=colors[index % len(colors)],
                       linestyle="--" if name.endswith("(study)") else "-")
        axis.set_xlabel("step", fontsize=8)
        axis.set_ylabel(label, fontsize=8)
        if axis.lines:
            axis.legend(fontsize=6)
    figure.suptitle(f"{Path(path).parent.name}/: probes and the study arms they reshape (mean over the seeds in "
                    "brackets)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def claims(directory=DEFAULT_DIR):
    """Write ``claims.md`` and ``claims.json`` into ``directory`` for each dataset folder with finished
    runs; returns the Markdown.

    ``python -m experiments.studies.charlm_v2.claims [DIR]`` reads DIR (default ``experiments/results/charlm_v2``),
    which holds one finished sweep of ``experiments/studies/charlm_v2/recipe.py`` per dataset (``tinyshakespeare/``,
    ``ptb_char/``), and writes ``DIR/claims.md`` and ``DIR/claims.json``. The claims and the comparisons
    that test them (``COMPARISONS``):

    1. the group models are competitive with matched baselines: each group arm − the LSTM, − the GPT;
    2. they beat their unconstrained counterpart: the O RNNs − the GL RNN;
    3. tangent-space mixing adds about 2–3% relative: O with scalar mixing − O without (both with the
       n-aware fix, ``rnn-O-naware``);

    and two that explain the numbers: the fix (``rnn-O-naware`` − ``rnn-O``) and the two O shapes
    (``rnn-O16-naware`` − ``rnn-O-naware``).

    A comparison a − b pairs the runs of arms a and b by seed (the seeds both finished with a finite
    score). Per seed s it takes the test bits per character of each run's best-validation model,
    d_s = a_s − b_s and r_s = 100 · d_s / b_s (percent), and reports the mean of d and of r with their
    95% t-intervals over the paired seeds (``experiments.analysis.stats.mean_ci``): windowed, and with the state
    carried across the test split where both arms are recurrent. A negative difference favours a.

    Each dataset also gets its checks: the unigram level, the cross-entropy of
    the training split's character frequencies (add-one smoothed) on the test split, with every arm's
    worst seed against it; each run's last validation bits (where its training ended, not its best
    checkpoint) against the same level on the validation split, with how far it rose above its best;
    and each arm's best steps, flagged where a best step is the run's last evaluation. Where the study
    has runs trained longer (``convergence/<arm>[-lr<rate>]-steps<N>-seed<s>``), a table sets them beside
    the study's run: how much more training, at the study's rate or another, still moves the test bits
    (``longer_training``). For scale, count models of order 2–5 (``ngram_levels``) are scored on test
    too. Probes outside the study (``PROBES``: folders of runs of a study arm in another shape, with
    an update bound or at another rate, e.g. ``o_width/rnn-O22-e225-naware-lr0.001-seed0``, O with the fix
    at n = 22 and a 225-wide embedding, or ``bound/rnn-T207-e32-bound3.1416-lr0.01-seed0``, T with
    θ = 3.1416) are
    paired by seed with the arm they reshape (``reshaped_arm``) and with ``PROBE_BASELINES``, in a
    table of their own; they are not study arms. Where one folder holds probes of two study arms at one shape
    (``probe_shape``), each at its study arm's rate, the study's own comparisons between those arms are
    repeated at that shape.
    """
    directory = Path(directory)
    sections, record = [], {}
    for folder, title in DATASET_FOLDERS.items():
        if not any((directory / folder).glob("*/final.json")):
            continue
        arms = load_runs(directory / folder)
        first = next(iter(arms.values()))[0]["config"]
        dataset = load_dataset(first["task"]["dataset"])
        vocab_size = first["model"]["vocab_size"]
        unigram, valid_unigram = (unigram_bits(dataset.streams["train"], dataset.streams[split], vocab_size)
                                  for split in ("test", "valid"))
        levels = ngram_levels(dataset, vocab_size)
        rows, arm_checks = comparisons(arms), checks(arms, unigram, valid_unigram)
        longer, probes = longer_training(directory / folder), probe_comparisons(directory / folder, arms)
        record[folder] = {"unigram_bits": unigram, "valid_unigram_bits": valid_unigram, "ngram_levels": levels,
                          "comparisons": rows, "checks": arm_checks,
                          "longer_training": {f"{arm}-seed{seed}": runs for (arm, seed), runs in longer.items()},
                          "probes": probes}
        sections.append(dataset_markdown(title, unigram, valid_unigram, levels, rows, arm_checks, arms)
                        + (longer_markdown(longer) if longer else "") + (probes_markdown(probes) if probes else ""))
    if not sections:
        raise ValueError(f"no finished runs under any of {[str(directory / f) for f in DATASET_FOLDERS]}")
    markdown = ("# The paper's claims, seed-paired\n\nTest bits per character of each run's best-validation "
                "model; a − b paired by seed, mean ± 95% t-interval over the paired seeds; relative = "
                f"100 (a − b) / b. Negative favours a. {NOT_CONVERGED}: the best step is the run's last "
                "evaluation. Written by `python -m experiments.studies.charlm_v2.claims`.\n\n" + "\n".join(sections))
    (directory / "claims.md").write_text(markdown)
    (directory / "claims.json").write_text(json.dumps(record, indent=2, allow_nan=True))
    return markdown


def main(argv=None):
    parser = CommandParser("experiments.studies.charlm_v2.claims", __doc__)
    parser.add_argument("directory", type=Path, nargs="?", default=DEFAULT_DIR,
                        help=f"the study's results (default: {DEFAULT_DIR})")
    directory = parser.parse_args(argv).directory
    if not any(any((directory / folder).glob("*/final.json")) for folder in DATASET_FOLDERS):
        parser.error(f"no finished runs under any of {[str(directory / folder) for folder in DATASET_FOLDERS]}")
    print(claims(directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
