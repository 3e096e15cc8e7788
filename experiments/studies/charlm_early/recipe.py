"""The early-learning study's budget and recipe: every arm of ``experiments.lm_arms`` at
``BUDGET`` real parameters, ``SEEDS`` seeds, AdamW / RiemannianAdam at ``LR`` with a 20-step warm-up
and cosine decay over ``STEPS`` steps of 32 × 128 tokens, the group maps at one plain rate."""

from __future__ import annotations

from experiments import lm_arms

BUDGET = 500_000
SEEDS = (0, 1, 2)
STEPS = 400
LR = 1e-3
TRAINING = {"steps": STEPS, "batch": 32, "length": 128, "lr": LR, "schedule": "cosine", "warmup": 20,
            "eval_every": 100, "eval_tokens": 20_000, "checkpoint_every": 100,
            "map_lr": "plain"}  # the committed runs used one rate for every map


def runs(dataset, vocab_size):
    """Every (arm, seed) of the study on ``dataset`` as SweepRuns."""
    return lm_arms.runs(dataset, vocab_size, BUDGET, TRAINING, SEEDS)
