"""``SweepRun``: one run of a sweep, as plain typed data (a leaf module: it imports nothing of the project)."""

from __future__ import annotations

from dataclasses import dataclass, field

OPTION_TYPES = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class SweepRun:
    """A run named ``name``: ``model`` trained on ``task`` with ``options``, a dict of config fields.

    ``options`` map field names of the training, task or model config to their values, typed
    (``{"dataset": "ptb_char", "n": 16, "lr": 1e-3}``); ``experiments.train.build_config`` splits
    and validates them.
    """

    name: str
    model: str
    task: str = "lm"
    options: dict = field(default_factory=dict)

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

    def argv(self):
        """The ``python -m experiments.train`` arguments of this run (without ``--run-dir``)."""
        return ["--model", self.model, "--task", self.task, *option_argv(self.options)]


def option_argv(options):
    """``{"n": 16, "lr": 0.001}`` -> ``["--n", "16", "--lr", "0.001"]``."""
    return [item for key, value in options.items() for item in (f"--{key.replace('_', '-')}", str(value))]
