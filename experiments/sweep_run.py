"""``SweepRun`` (one run of a sweep) and ``Tuning`` (a sweep's learning-rate search), as plain typed
data (a leaf module: it imports nothing of the project)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OPTION_TYPES = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class SweepRun:
    """A run named ``name``: ``model`` trained on ``task`` with ``options``, a dict of config fields.

    ``options`` map field names of the training, task or model config to their values, typed
    (``{"dataset": "ptb_char", "n": 16, "lr": 1e-3}``); ``experiments.training.config.build_config`` splits
    and validates them. ``processes``: how many data-parallel processes train the run (torchrun
    with ``--nproc_per_node`` of it, ``experiments.sweep``); the global ``batch`` is shared among them.
    """

    name: str
    model: str
    task: str = "lm"
    options: dict = field(default_factory=dict)
    processes: int = 1

    def __post_init__(self):
        for label in ("name", "model", "task"):
            value = getattr(self, label)
            if not isinstance(value, str) or not value:
                raise TypeError(f"SweepRun.{label} must be a non-empty str, got {value!r}")
        if not isinstance(self.options, dict):
            raise TypeError(f"SweepRun.options must be a dict, got {type(self.options).__name__}")
        for key, value in self.options.items():
            if not isinstance(key, str) or not isinstance(value, OPTION_TYPES):
                raise TypeError(f"{self.name}: option {key!r}={value!r} must be a str key with a bool, int, float, "
                                "str or None value")
        if isinstance(self.processes, bool) or not isinstance(self.processes, int) or self.processes < 1:
            raise TypeError(f"SweepRun.processes must be a positive int, got {self.processes!r}")

    def argv(self):
        """The ``python -m experiments.train`` arguments of this run (without ``--run-dir``)."""
        return ["--model", self.model, "--task", self.task, *option_argv(self.options)]


def option_argv(options):
    """``{"n": 16, "lr": 0.001}`` -> ``["--n", "16", "--lr", "0.001"]``."""
    return [item for key, value in options.items() for item in (f"--{key.replace('_', '-')}", str(value))]


def arm_of(name):
    """``o-rnn-seed3`` -> ``o-rnn``: a run's arm is its name without the ``-seed<k>`` suffix."""
    return re.sub(r"-seed\d+$", "", name)


LEARNING_RATES = (3e-4, 1e-3, 3e-3, 1e-2)


@dataclass(frozen=True)
class Tuning:
    """A sweep's learning-rate search (``experiments.tuning``): before its runs, every arm is trained
    once per rate in ``rates`` with seed ``seed`` and the options overridden by ``options`` (a
    shorter budget), and its runs then use the rate whose run reached the lowest validation score.

    ``stability_margin`` (validation units, bits for language modelling; None: no check): a short
    search cannot see a divergence that starts after it. With a margin, each arm's first run trains
    first at the chosen rate; if it diverged (its loss turned non-finite, or its last validation
    score ends more than the margin above its best), the arm moves to its next-best searched rate
    (``experiments.tuning.settle_rates``).

    ``extend_edges``: an arm whose best rate is the largest or the smallest it was searched at is also
    searched one step further (3e-2 -> 1e-1, 1e-3 -> 3e-4), until its best rate is inside its grid
    (``experiments.tuning.arm_rates``): a grid that denies an arm its rate flatters the others."""

    rates: tuple = LEARNING_RATES
    options: dict = field(default_factory=dict)
    seed: int = 0
    stability_margin: float | None = None
    extend_edges: bool = False

    def __post_init__(self):
        if not self.rates or not all(isinstance(r, float) and r > 0 for r in self.rates):
            raise ValueError(f"Tuning.rates must be positive floats, got {self.rates!r}")
        if len(set(self.rates)) != len(self.rates):
            raise ValueError(f"Tuning.rates repeat a rate: {self.rates!r}")
        if not isinstance(self.options, dict) or {"lr", "seed"} & set(self.options):
            raise ValueError("Tuning.options must be a dict that sets neither lr nor seed (the search sets them)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"Tuning.seed must be a non-negative int, got {self.seed!r}")
        if self.stability_margin is not None and not (isinstance(self.stability_margin, float)
                                                      and self.stability_margin > 0):
            raise ValueError(f"Tuning.stability_margin must be a positive float or None, got {self.stability_margin!r}")
        if not isinstance(self.extend_edges, bool):
            raise ValueError(f"Tuning.extend_edges must be a bool, got {self.extend_edges!r}")
