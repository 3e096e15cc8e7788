"""The ``state-tracking`` preset (issue 14 items 2, 3, 5): parity, counting mod 3 and word problems on
S3, A5 and S5, every model arm of ``experiments.sweeps.tracking`` at one parameter budget per task,
``SEEDS`` seeds each, trained on lengths 1–64 and tested at 64, 128, 256, 512 and 1024.

    python -m experiments.sweep state-tracking --workers 2 --out experiments/results/state_tracking/study
    python -m experiments.tracking_report experiments/results/state_tracking/study

Recipe (one for every arm; no per-model tuning in this budget): ``STEPS`` steps of batch ``BATCH``,
one length per batch uniform in 1–64, ``experiments.sweeps.tracking.training`` (AdamW /
RiemannianAdam at 1e-2, 3e-3 for the two attention models, a 10-step warm-up, cosine decay,
gradients clipped at 1; validation only at the end: each evaluation covers all five test lengths);
``EVAL_SEQUENCES`` sequences per test length. Remedy arms (issue 14 item 3): ``-curriculum``, the
input-driven group RNNs with the length curriculum 1 → 64 over the first ``CURRICULUM_STEPS`` steps;
``-spread``, the same RNNs with their token updates' rotation angles initially spread over [0, π]
(``input_init="spread"``), on the plain recipe.

Budget (issue 14 item 5: the whole study, this preset and ``copy``, at most 3 hours of the 2-core
machine). Measured on the committed runs: the 345 runs' training took 0.94 worker-hours in all
(``train_seconds`` of their final.json, summed); at the code of revision 6b17f36, two workers
finished the last 182 runs (evaluations included) in about 18 minutes, so the preset takes about
35 minutes of wall time; the mLSTM-NS runs are the slowest (about 30–110 s of training each).
"""

from experiments.sweeps.tracking import arms, remedy_arms, spread_arms, sweep_runs, training
from experiments.tasks.sequences import TEST_LENGTHS, TRAIN_MAX_LENGTH

SEEDS = (0, 1, 2)
STEPS = 300
BATCH = 32
CURRICULUM_STEPS = 225
EVAL_SEQUENCES = 64
# cell: (task, task options, vocabulary, parameter budget)
CELLS = {"parity": ("count", {"modulus": 2}, 2, 3000),
         "mod3": ("count", {"modulus": 3}, 3, 3000),
         "S3": ("words", {"word_group": "S3"}, 6, 3000),
         "A5": ("words", {"word_group": "A5"}, 60, 12000),
         "S5": ("words", {"word_group": "S5"}, 120, 12000)}


def runs(cells=CELLS, seeds=SEEDS, steps=STEPS, batch=BATCH, eval_sequences=EVAL_SEQUENCES,
         curriculum_steps=CURRICULUM_STEPS, test_length=TEST_LENGTHS[-1]):
    """Every (cell, arm, seed), remedy arms included, as SweepRuns (the defaults are the study), seed-major:
    a sweep on one worker finishes one seed of every cell before the next seed."""
    result = []
    for cell, (task, task_options, vocab, budget) in cells.items():
        sized = arms(vocab, budget, TRAIN_MAX_LENGTH, test_length)
        lengths = {"eval_sequences": eval_sequences, "eval_max_length": test_length}
        remedies = {f"{arm}-curriculum": entry for arm, entry in remedy_arms(sized).items()}
        for arm_set, extra in ((sized, {}), (remedies, {"curriculum_steps": curriculum_steps}),
                               (spread_arms(sized), {})):
            for arm, entry in arm_set.items():
                result += sweep_runs(cell, task, {arm: entry}, training(entry[0], steps, batch), seeds,
                                     {**task_options, **lengths, **extra})
    return sorted(result, key=lambda run: run.options["seed"])  # stable: every cell's seed 0 comes first


RUNS = runs()
