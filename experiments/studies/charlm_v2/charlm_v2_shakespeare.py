"""The v2 character-level study on Tiny Shakespeare (65 symbols); see ``recipe``."""

from experiments.studies.charlm_v2.recipe import TUNING, runs  # noqa: F401 - TUNING makes the sweep tune its rates

OUT = "experiments/results/charlm_v2/tinyshakespeare"
RUNS = runs("tinyshakespeare", vocab_size=65)
