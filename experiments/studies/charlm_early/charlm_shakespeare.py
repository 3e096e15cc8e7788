"""The early-learning character-level study on Tiny Shakespeare (65 symbols); see ``recipe``."""

from experiments.studies.charlm_early.recipe import runs

RUNS = runs("tinyshakespeare", vocab_size=65)
