"""matplotlib's pyplot on the Agg backend (files only, no display), chosen once for the library and
the studies: ``from experiments.analysis.plotting import plt``."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt"]
