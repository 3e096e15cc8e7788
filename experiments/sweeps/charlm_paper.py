"""The ``paper`` preset: the character-level study at full scale, for a GPU.

The same arms as the CPU study (experiments/sweeps/charlm.py), sized to 2M parameters (the
paper's upper budget), trained 20× longer (8,000 steps of 64 × 256 characters, lr 1e-3 with a
200-step warm-up and cosine decay), 5 seeds, on both Penn Treebank characters and Tiny
Shakespeare. Not run on the 2-core CPU machine: there one group-model step at this size takes
seconds, so the sweep would take weeks.

    python -m experiments.sweep paper --workers 1
"""

import dataclasses

from experiments.sweeps.charlm import runs

NEEDS_CUDA = "The paper preset is 12 arms × 5 seeds × 2 datasets × 8,000 steps at 2M parameters: weeks on a CPU."
TRAINING = {"steps": 8000, "batch": 64, "length": 256, "lr": 1e-3, "schedule": "cosine", "warmup": 200,
            "eval_every": 500, "eval_tokens": 200_000, "checkpoint_every": 500, "device": "auto"}
SEEDS = (0, 1, 2, 3, 4)
RUNS = [run for dataset, vocab in (("ptb_char", 50), ("tinyshakespeare", 65))
        for run in runs(dataset, vocab, budget=2_000_000, training=TRAINING, seeds=SEEDS)]
RUNS = [dataclasses.replace(run, name=f"{run.options['dataset']}-{run.name}") for run in RUNS]
