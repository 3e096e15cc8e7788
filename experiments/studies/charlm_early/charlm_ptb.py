"""The early-learning character-level study on Penn Treebank characters (50 symbols); see ``recipe``."""

from experiments.studies.charlm_early.recipe import runs

RUNS = runs("ptb_char", vocab_size=50)
