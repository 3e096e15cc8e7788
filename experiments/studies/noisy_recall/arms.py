"""Noisy-recall sweeps of the mLSTM (the recall recipe), shared by the ``nar-cpu`` and ``nar-paper`` presets.

A run's name encodes its cell: ``V{vocab}-L{length}-lr{lr}-{read}-{schedule}-seed{k}``; the
report pairs runs that differ only in the read (or only in the schedule) by seed.
"""

from __future__ import annotations

from experiments.sweep_run import SweepRun
from experiments.tasks.recall import RECIPE
from reference.config import MLSTMConfig

DEFAULT_NS_STEPS = MLSTMConfig.ns_steps  # the plain label ``ns`` means this many steps


def runs(settings, lrs, seeds, reads=("plain", "ns"), schedules=("cosine",), ns_steps=DEFAULT_NS_STEPS,
         **options):
    """Every (setting, lr, read, schedule, seed) as a recall SweepRun; ``options``: more config fields.

    The NS read with ``ns_steps`` other than the model default (5) is labelled ``ns<k>`` in the run
    names (``ns`` is the default).
    """
    result = []
    default = ns_steps == DEFAULT_NS_STEPS
    label = {"ns": "ns" if default else f"ns{ns_steps}"}
    for vocab, length in settings:
        for lr in lrs:
            for read in reads:
                for schedule in schedules:
                    for seed in seeds:
                        name = f"V{vocab}-L{length}-lr{lr:g}-{label.get(read, read)}-{schedule}-seed{seed}"
                        steps = {"ns_steps": ns_steps} if read == "ns" and not default else {}
                        result.append(SweepRun(name, "mlstm", "recall", {
                            **RECIPE, "vocab_size": vocab, "length": length, "lr": lr, "read": read,
                            "schedule": schedule, "seed": seed, **steps, **options}))
    return result
