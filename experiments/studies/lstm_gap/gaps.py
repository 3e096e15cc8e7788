"""The gap study's answer: each arm's test bits over seeds, and its seed-paired gap to the LSTM.

    python -m experiments.studies.lstm_gap.gaps [--study DIR] [--plain DIR] [--out DIR]

Arms: the study's runs (``study.OUT``, one per seed at each arm's chosen rate) and the committed
plain O(22) (``PLAIN``: charlm_v2's o_width arm, not trained again), whose seeds pair with the
study's. Scores: test bits per character of each run's best-validation model, windowed and with the
state carried (``TEST_SCORES``); each arm's mean ± 95% t-interval over its seeds, and arm − LSTM paired
by seed. Writes ``gaps.json`` and ``gaps.md`` into ``--out`` (default: the study's directory).
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis.stats import TEST_SCORES, format_interval, paired
from experiments.cli import CommandParser
from experiments.report import load_runs
from experiments.studies.lstm_gap.study import OUT

PLAIN = "experiments/results/charlm_v2/ptb_char/o_width"
PLAIN_RUN = "rnn-O22-e225-naware-lr0.001"  # the committed best group arm: O(22), 225 wide, at 1e-3
PLAIN_ARM = "rnn-O22"
BASELINE = "lstm"


def arms(study=OUT, plain=PLAIN):
    """``{arm: [run]}``: the study's arms and the plain O(22) (``report.load_runs``' runs)."""
    found = load_runs(study)
    plain_runs = load_runs(plain).get(PLAIN_RUN)
    if plain_runs:
        found[PLAIN_ARM] = plain_runs
    return found


def gaps(found):
    """Rows of each arm: its seeds, its scores' intervals, and its seed-paired gap to ``BASELINE``
    (None for the baseline itself or an arm that shares no seed with it)."""
    rows = []
    for arm in sorted(found, key=lambda name: (name != BASELINE, name)):
        runs = found[arm]
        row = {"arm": arm, "seeds": sorted(run["config"]["train"]["seed"] for run in runs),
               "lr": runs[0]["config"]["train"]["lr"]}
        for mode, key in TEST_SCORES.items():
            row[mode] = format_interval([run["final"][key] for run in runs])
            row[f"{mode}_gap"] = None if arm == BASELINE else paired(found, arm, BASELINE, key)
        rows.append(row)
    return rows


def _gap_cell(gap):
    if gap is None:
        return "—"
    seeds = len(gap["seeds"])
    return f"{gap['difference']:+.3f}" + (f" ± {gap['half_width']:.3f} ({seeds} seeds)" if seeds > 1 else " (one seed)")


def markdown(rows):
    lines = ["| arm | lr | seeds | test bits, windowed | − LSTM, paired | test bits, carried | − LSTM, paired |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['arm']} | {row['lr']:g} | {', '.join(map(str, row['seeds']))} | {row['windowed']} | "
                     f"{_gap_cell(row['windowed_gap'])} | {row['carried']} | {_gap_cell(row['carried_gap'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = CommandParser("experiments.studies.lstm_gap.gaps", __doc__)
    parser.add_argument("--study", type=Path, default=Path(OUT), help="the study's sweep directory")
    parser.add_argument("--plain", type=Path, default=Path(PLAIN), help="the committed plain O(22)'s folder")
    parser.add_argument("--out", type=Path, default=None, help="where gaps.json and gaps.md go (default: --study)")
    args = parser.parse_args(argv)
    with parser.refusals(ValueError):
        rows = gaps(arms(args.study, args.plain))
    out = args.out or args.study
    out.mkdir(parents=True, exist_ok=True)
    (out / "gaps.json").write_text(json.dumps(rows, indent=2))
    (out / "gaps.md").write_text(markdown(rows))
    print(markdown(rows), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
