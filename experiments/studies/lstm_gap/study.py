"""The gap study at 200k parameters: the screen's mechanisms on the committed best group arm's shape,
beside the LSTM and expRNN, with the v2 recipe.

Penn Treebank characters, every arm sized to ``BUDGET`` parameters (±2%), the v2 recipe's ``TRAINING``
(2,000 steps of 32 × 128), seeds ``SEEDS``. Each arm's rate is searched at the full length on the
screen's grid, extended past an edge its best rate sits on (``TUNING``: the search runs are seed 0's
runs), and checked for divergence. The arms: ``templates``. The committed best group arm, plain O(22)
with a 225-wide embedding (``experiments/results/charlm_v2/ptb_char/o_width/``), is not trained again:
the README pairs its seeds with these. Results: ``OUT``. The heads arm (BO(120) in blocks of 4 with
the leak) was cut after its first search run, 0.65 validation bits behind the leaky O(22): the
README says why; its run stays in ``OUT/tune``.
"""

from __future__ import annotations

from experiments import lm_arms
from experiments.baselines import ExpRNNConfig, LSTMConfig
from experiments.studies.lstm_gap.screen import LEAK_ALPHA, RATES
from experiments.sweep_run import Tuning
from reference.config import GroupRNNConfig

DATASET, VOCAB_SIZE = "ptb_char", 50
BUDGET = 200_000
SEEDS = (0, 1, 2)
TRAINING = {"steps": 2000, "batch": 32, "length": 128, "lr": 1e-3, "schedule": "cosine", "warmup": 50,
            "eval_every": 100, "eval_tokens": 100_000, "checkpoint_every": 100, "carried_streams": 16,
            "device": "auto"}  # the v2 recipe's (charlm_v2/recipe.py); lr: replaced by each arm's chosen rate
TUNING = Tuning(rates=RATES, options={}, stability_margin=0.25, extend_edges=True)  # the v2 recipe's margin
O_N = 22  # the committed best group arm's n (o_width: O(22), 225 wide, 2.322 test bits)
OUT = "experiments/results/lstm_gap/study"


def templates(vocab_size, length=None):
    """``{arm: (model name, config template)}``, the cheap arms first (the search trains in this order);
    the group RNNs are sized along their embedding width (``FREE``), n fixed, and forget with the
    screen's constant α = ``LEAK_ALPHA`` in the fused recurrence. ``rnn-O22-leak``: forgetting alone on
    the committed shape."""
    leak = {"forget": "constant", "forget_alpha": LEAK_ALPHA, "recurrence": "fused"}
    return {
        "lstm": ("lstm", LSTMConfig(vocab_size=vocab_size, hidden_size=1)),
        "exprnn": ("exprnn", ExpRNNConfig(vocab_size=vocab_size, hidden_size=1)),
        f"rnn-O{O_N}-leak": ("group_rnn", GroupRNNConfig(vocab_size=vocab_size, group="O", n=O_N, **leak)),
    }


FREE = {arm: "embedding_dim" for arm, (model, _) in templates(VOCAB_SIZE).items() if model == "group_rnn"}
RUNS = lm_arms.runs(DATASET, VOCAB_SIZE, BUDGET, TRAINING, SEEDS, templates, FREE)
