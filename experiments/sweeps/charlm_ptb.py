"""The character-level study on Penn Treebank characters (50 symbols); see experiments/sweeps/charlm.py."""

from experiments.sweeps.charlm import runs

RUNS = runs("ptb_char", vocab_size=50)
