"""The gap study's second dataset: the best group arm (the leaky O(22)) and the LSTM on Tiny
Shakespeare at 200k parameters, with the Penn Treebank cell's recipe (``study``: budget, training,
seeds, arm shapes, searched at the full length and checked for divergence).

The search starts from the two rates ``RATES`` and grows past whichever edge an arm's best rate sits
on, one ×3 step at a time, until the best is inside its grid (``TUNING``). Where the validation bits
are unimodal in the rate, as they were for every arm on Penn Treebank, this chooses the rate the
decided grid {1e-3, …, 3e-2} extended the same way would, without training the rates on the far
side of a worse one: on Penn Treebank the leaky O(22) diverged at 1e-2 and 3e-2, two 25-min runs.
Results: ``OUT``.
"""

from __future__ import annotations

import dataclasses

from experiments import lm_arms
from experiments.studies.lstm_gap import study

DATASET, VOCAB_SIZE = "tinyshakespeare", 65
RATES = (1e-3, 3e-3)
TUNING = dataclasses.replace(study.TUNING, rates=RATES)
OUT = "experiments/results/lstm_gap/shakespeare"


def templates(vocab_size, length=None):
    """``{arm: (model name, config template)}``: the LSTM and the leaky O(22) of ``study.templates``."""
    return {arm: arm_template for arm, arm_template in study.templates(vocab_size, length).items()
            if arm in ("lstm", f"rnn-O{study.O_N}-leak")}


FREE = {arm: free for arm, free in study.FREE.items() if arm in templates(VOCAB_SIZE)}
RUNS = lm_arms.runs(DATASET, VOCAB_SIZE, study.BUDGET, study.TRAINING, study.SEEDS, templates, FREE)
