"""A training run's progress on stderr: a tqdm bar on a terminal, otherwise one line per evaluation."""

from __future__ import annotations

import sys

from tqdm import tqdm

from experiments.analysis.diagnostics import DIAGNOSTIC_PREFIXES


class Progress:
    """Training progress on ``stream``: a tqdm bar on a terminal (the training metrics and the last
    validation score beside it), otherwise one plain line per evaluation. Either way a first line says
    what runs (``start``), and a second, after the first step, how long the rest should take.
    ``drift``: show the group drift (false for a model without compact-group-valued parameters).
    """

    def __init__(self, name, total, initial, stream=None, selection_key=None, drift=True):
        self.name, self.total, self.stream = name, total, sys.stderr if stream is None else stream
        self.initial, self.selection_key, self.validation, self.drift = initial, selection_key, {}, drift
        self.bar = tqdm(total=total, initial=initial, desc=name, unit="step", file=self.stream) \
            if self.stream.isatty() else None

    def _line(self, text):
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def start(self, description):
        self._line(f"{self.name}: {description}")

    def step(self, step, metrics, tokens_per_second, seconds):
        """After ``step`` (1-based), with the task's training ``metrics`` and ``seconds`` since the start."""
        if step == self.initial + 1 and self.total is not None and step < self.total:
            left = self.total - step
            self._line(f"{self.name}: the first step took {seconds:.2f} s; the {left} left should take about "
                       f"{_duration(seconds * left)} (more with evaluations)")
        if self.bar is not None:
            self.bar.update()
            shown = {key: f"{value:.3f}" for key, value in {**metrics, **self.validation}.items()}
            self.bar.set_postfix(**shown, tok_s=f"{tokens_per_second:.0f}")

    def evaluation(self, record, tokens_per_second):
        if self.selection_key in record:
            self.validation = {self.selection_key: record[self.selection_key]}
        if self.bar is None:
            values = " ".join(f"{k} {v:.4g}" for k, v in record.items()
                              if k != "step" and isinstance(v, float) and not k.startswith(DIAGNOSTIC_PREFIXES)
                              and (k != "drift" or self.drift))
            total = f"/{self.total}" if self.total is not None else ""
            print(f"{self.name} step {record['step']}{total} {values} tokens/s {tokens_per_second:.0f}",
                  file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _duration(seconds):
    """``42 s``, ``3.5 min`` or ``1.2 h``."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
