"""The gap study's screen: which mechanism moves an O(16) group RNN's bits toward the LSTM's.

Penn Treebank characters, every arm sized to ``BUDGET`` parameters (±2%), ``STEPS`` steps of 32 × 128
(2.5M tokens), seeds ``SEEDS``. Each arm's rate is the one of ``RATES`` (extended past an edge its
best rate sits on) whose seed-0 run reached the lowest validation bits at the full length (``TUNING``:
the search runs are seed 0's runs), and the other seeds train at it. The arms: ``templates``.
Results: ``OUT``; the study's README says what the screen chose.
"""

from __future__ import annotations

import dataclasses

from experiments import lm_arms
from experiments.baselines import ExpRNNConfig, LSTMConfig
from experiments.sweep_run import Tuning
from reference.config import GroupRNNConfig

DATASET, VOCAB_SIZE = "ptb_char", 50
BUDGET = 55_000
SEEDS = (0, 1)
STEPS = 600
RATES = (1e-3, 3e-3, 1e-2, 3e-2)  # every arm's grid (../shared/DECISIONS.md, the gap study)
TRAINING = {"steps": STEPS, "batch": 32, "length": 128, "lr": 1e-3, "schedule": "cosine", "warmup": 50,
            "eval_every": 100, "eval_tokens": 100_000, "checkpoint_every": 100, "carried_streams": 16,
            "device": "auto"}  # lr: replaced by each arm's chosen rate
TUNING = Tuning(rates=RATES, options={}, stability_margin=0.25, extend_edges=True)  # the v2 recipe's margin
LEAK_ALPHA = 0.42  # the probe's constant α, which recovered nearly all of the gate's gain
GATE_ALPHA = 0.45  # the gate's largest α: room above the constant's, below 1/2 where the blend is singular
OUT = "experiments/results/lstm_gap/screen"


def templates(vocab_size, length=None):
    """``{arm: (model name, config template)}``; the group RNNs are sized along their embedding width
    (``FREE``), n fixed. ``rnn-O16``: the baseline, the paper's update; ``-leak``: the leaky update
    with a constant α = ``LEAK_ALPHA`` (``GroupRNNConfig.forget``); ``-gate``: with the learned gate,
    α_t ≤ ``GATE_ALPHA``; ``rnn-O12x2``: depth, two layers of O(12) (2 × 144 state entries against
    256; two of O(16) do not fit the budget); ``rnn-BO4``: heads, 16 independent O(4) states (BO(64),
    block 4: as many features as O(16)); ``exprnn``: the published orthogonal RNN; ``lstm``."""
    o16 = GroupRNNConfig(vocab_size=vocab_size, group="O", n=16)
    return {
        "rnn-O16": ("group_rnn", o16),
        "rnn-O16-leak": ("group_rnn", dataclasses.replace(o16, recurrence="loop", forget="constant",
                                                          forget_alpha=LEAK_ALPHA)),
        "rnn-O16-gate": ("group_rnn", dataclasses.replace(o16, recurrence="loop", forget="gate",
                                                          forget_alpha=GATE_ALPHA)),
        "rnn-O12x2": ("group_rnn", dataclasses.replace(o16, n=12, num_layers=2)),
        "rnn-BO4": ("group_rnn", GroupRNNConfig(vocab_size=vocab_size, group="BO", block=4, n=64)),
        "exprnn": ("exprnn", ExpRNNConfig(vocab_size=vocab_size, hidden_size=1)),
        "lstm": ("lstm", LSTMConfig(vocab_size=vocab_size, hidden_size=1)),
    }


FREE = {arm: "embedding_dim" for arm, (model, _) in templates(VOCAB_SIZE).items() if model == "group_rnn"}
RUNS = lm_arms.runs(DATASET, VOCAB_SIZE, BUDGET, TRAINING, SEEDS, templates, FREE)
