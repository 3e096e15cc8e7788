"""The character-level study on Tiny Shakespeare (65 symbols); see experiments/sweeps/charlm.py."""

from experiments.sweeps.charlm import runs

RUNS = runs("tinyshakespeare", vocab_size=65)
