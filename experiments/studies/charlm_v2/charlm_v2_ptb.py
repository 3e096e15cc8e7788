"""The v2 character-level study on Penn Treebank characters (50 symbols); see ``recipe``."""

from experiments.studies.charlm_v2.recipe import TUNING, runs  # noqa: F401 - TUNING makes the sweep tune its rates

OUT = "experiments/results/charlm_v2/ptb_char"
RUNS = runs("ptb_char", vocab_size=50)
