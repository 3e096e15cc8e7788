"""The v2 character-level study on Penn Treebank characters (50 symbols); see experiments/sweeps/charlm_v2.py."""

from experiments.sweeps.charlm_v2 import TUNING, runs  # noqa: F401 - TUNING makes the sweep tune its rates

OUT = "experiments/results/charlm_v2/ptb_char"
RUNS = runs("ptb_char", vocab_size=50)
