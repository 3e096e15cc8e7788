"""The ``copy`` preset: the copy task (10 symbols from 8, T blanks, a marker, recall) at each delay
T ∈ {100, 500, 1000, 2000}, every arm of ``arms`` at ``BUDGET`` parameters, ``SEEDS`` seeds, each
run about ``TOKENS`` training tokens (at least ``MIN_STEPS`` steps). Every (delay, arm) chooses its
rate from ``TUNING.rates`` on validation first (README.md: why). The mLSTM-NS arm runs at T = 100.

    python -m experiments.sweep copy --workers 2 --out experiments/results/state_tracking/copy
    python -m experiments.studies.state_tracking.report experiments/results/state_tracking/copy
"""

from experiments.sweep_run import Tuning
from experiments.studies.state_tracking.arms import arms, sweep_runs, training
from experiments.tasks.copy import COPY_DELAYS, COPY_LENGTH, sequence_length

SEEDS = (0, 1, 2)
BUDGET = 8000
BATCH = 8
TOKENS = 240_000
MIN_STEPS = 20
EVAL_SEQUENCES = 32
NS_DELAYS = (100,)
TUNING = Tuning(rates=(1e-3, 1e-2))  # per (delay, arm), seed 0, the full run: the rate with the lower valid_loss


def steps(delay, batch=BATCH, tokens=TOKENS, min_steps=MIN_STEPS):
    """Training steps at ``delay``: ≈ ``tokens`` / (batch · (T + 20)), at least ``min_steps``."""
    return max(min_steps, round(tokens / (batch * sequence_length(delay))))


def runs(delays=COPY_DELAYS, seeds=SEEDS, budget=BUDGET, batch=BATCH, tokens=TOKENS, min_steps=MIN_STEPS,
         eval_sequences=EVAL_SEQUENCES, copy_length=COPY_LENGTH):
    """Every (delay, arm, seed) as SweepRuns (the defaults are the study)."""
    result = []
    for delay in delays:
        length = sequence_length(delay, copy_length)
        count = steps(delay, batch, tokens, min_steps)
        sized = {arm: entry for arm, entry in arms(10, budget, length, length).items()
                 if arm != "mlstm-ns" or delay in NS_DELAYS}
        for arm, (model, config) in sized.items():
            result += sweep_runs(f"T{delay}", "copy", {arm: (model, config)}, training(model, count, batch), seeds,
                                 {"delay": delay, "copy_length": copy_length, "eval_sequences": eval_sequences})
    return result


RUNS = runs()
