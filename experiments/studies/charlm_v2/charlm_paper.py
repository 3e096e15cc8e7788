"""The ``paper`` preset: the character-level study at full scale, for a GPU, with the fair recipe.

The arms of ``experiments.lm_arms`` (those of the early-learning study), sized to 2M parameters (the
paper's upper budget), on both Penn Treebank characters and Tiny Shakespeare. Each arm's
learning rate is chosen on validation from {3e-4, 1e-3, 3e-3, 1e-2} by one seed trained for
``TUNE_STEPS`` (``experiments.tuning``), checked at the full length (an arm whose seed-0 run
diverges moves to its next-best rate: ``STABILITY_MARGIN``, as in ``charlm_v2``); then 5 seeds
per arm train 8,000 steps of 64 × 256 characters at that rate (200-step warm-up, cosine decay),
and the best-validation model is
tested (windowed, and for recurrent arms with the state carried across the test split in 16
pieces). Not run on the 2-core CPU machine: there one group-model step at this size takes
seconds, so the sweep would take weeks.

    python -m experiments.sweep paper --workers 1
"""

import dataclasses

from experiments.sweep_run import Tuning
from experiments import lm_arms
from experiments.studies.charlm_v2.recipe import STABILITY_MARGIN

NEEDS_CUDA = "The paper preset is 12 arms × 5 seeds × 2 datasets × 8,000 steps at 2M parameters: weeks on a CPU."
TRAINING = {"steps": 8000, "batch": 64, "length": 256, "lr": 1e-3, "schedule": "cosine", "warmup": 200,
            "eval_every": 500, "eval_tokens": 200_000, "checkpoint_every": 500, "carried_streams": 16,
            "device": "auto"}  # lr: replaced by each arm's chosen rate
TUNE_STEPS = 2000
TUNING = Tuning(options={"steps": TUNE_STEPS}, stability_margin=STABILITY_MARGIN)
SEEDS = (0, 1, 2, 3, 4)
RUNS = [run for dataset, vocab in (("ptb_char", 50), ("tinyshakespeare", 65))
        for run in lm_arms.runs(dataset, vocab, 2_000_000, TRAINING, SEEDS)]
RUNS = [dataclasses.replace(run, name=f"{run.options['dataset']}-{run.name}") for run in RUNS]
