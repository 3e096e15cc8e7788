"""The ``copy`` preset (issue 14 items 2 and 5): the copy task (10 symbols from 8, T blanks, a marker,
recall) at each fixed delay T ∈ {100, 500, 1000, 2000}, every model arm of
``experiments.sweeps.tracking`` at ``BUDGET`` parameters, ``SEEDS`` seeds; each run's test loss is
reported next to the memoryless baseline 10·ln 8/(T + 20).

    python -m experiments.sweep copy --workers 2 --out experiments/results/state_tracking/copy
    python -m experiments.tracking_report experiments/results/state_tracking/copy

Learning rates. A first pass at the state-tracking rates (1e-2; 3e-3 for the attention models)
diverged for the recurrent SO RNN at T = 100: validation loss 0.80–2.46 nats, against 0.173 for
the memoryless baseline and ln 10 = 2.30 for a uniform guess, with per-step rotations of mean
4.2 rad and max 8.8 (past π), gradient norm 13,000 before clipping and the state's lag-10
self-similarity −0.23 at the end (seed 2; the divergence mechanism of issue 13 item 2), while the
input-driven SO RNN sat at the baseline (0.18). So every (delay, arm) chooses its rate from
``TUNING.rates`` on validation loss (one seed-0 run per rate, ``experiments.tuning``) before its
seeds train.

Budget. A training step's cost grows with T. Timed single-threaded beside a 2-worker sweep at 8k
parameters, batch 8 × 2020 tokens, at revision e93958d: 0.13–0.14 s (the input-driven T and BO
RNNs), 1.1–1.2 s (input-driven SO and U, run by the fused loop, 1.5–2× faster than the scan at this
length), 1.7 s (recurrent SO), 4.1 s (group Transformer); the mLSTM-NS read costs about 20× the
plain one per position. So every run gets the same token budget (``steps``: about ``TOKENS``
training tokens, at least ``MIN_STEPS`` steps) at ``BUDGET`` parameters and batch ``BATCH``: about
35 minutes for the seed runs with 2 workers, about 60 with the rate search. That leaves the long
delays under-trained: at T ≥ 1000 a result below the baseline is a finding, one at it is not.
The mLSTM-NS arm runs at T = 100 only.
"""

from experiments.sweep_run import Tuning
from experiments.sweeps.tracking import arms, sweep_runs, training
from experiments.tasks.copying import COPY_DELAYS, COPY_LENGTH, sequence_length

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
