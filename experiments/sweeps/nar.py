"""Noisy-recall sweeps of the mLSTM (experiments.recall), shared by the ``nar-cpu`` and ``nar-paper`` presets.

A run's name encodes its cell: ``V{vocab}-L{length}-lr{lr}-{read}-{schedule}-seed{k}``; the
report pairs runs that differ only in the read (or only in the schedule) by seed.
"""

from __future__ import annotations

from experiments.sweep import SweepRun


def runs(settings, lrs, seeds, reads=("plain", "ns"), schedules=("cosine",), **options):
    """Every (setting, lr, read, schedule, seed) as a recall SweepRun; ``options``: RecallConfig fields."""
    result = []
    for vocab, length in settings:
        for lr in lrs:
            for read in reads:
                for schedule in schedules:
                    for seed in seeds:
                        name = f"V{vocab}-L{length}-lr{lr:g}-{read}-{schedule}-seed{seed}"
                        result.append(SweepRun(name, "mlstm", "nar", {
                            "vocab_size": vocab, "length": length, "lr": lr, "read": read, "schedule": schedule,
                            "seed": seed, **options}, program="recall"))
    return result
