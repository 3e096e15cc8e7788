"""The ``state-tracking`` preset: parity, counting mod 3 and word problems on S3, A5 and S5, every arm
of ``arms`` at one parameter budget per task, ``SEEDS`` seeds each, trained on lengths 1–64 and
tested at 64 to 1024. One recipe for every arm (``arms.training``), ``STEPS`` steps of batch
``BATCH``; the remedy arms ``-curriculum`` and ``-spread`` beside the plain ones.

    python -m experiments.sweep state-tracking --workers 2 --out experiments/results/state_tracking/study
    python -m experiments.studies.state_tracking.report experiments/results/state_tracking/study
"""

from experiments.studies.state_tracking.arms import arms, remedy_arms, spread_arms, sweep_runs, training
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
