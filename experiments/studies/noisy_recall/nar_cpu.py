"""The ``nar-cpu`` preset: noisy recall at a size a 2-core CPU finishes in about 40 minutes.

V = 48 (16 keys, 16 values, 16 noise tokens), L = 64, frac_noise 0.8; the mLSTM at width 32;
1,000 steps of batch 32 at lr 1e-2, validation every 50 steps on 256 fixed sequences. Arms: the
plain and the NS read, each with cosine decay and a constant rate; 8 paired seeds per arm.
Why this size: README.md here.

    python -m experiments.sweep nar-cpu --workers 2 --out experiments/results/noisy_recall/cpu
    python -m experiments.report experiments/results/noisy_recall/cpu
"""

from experiments.studies.noisy_recall.arms import runs

RUNS = runs([(48, 64)], lrs=(1e-2,), seeds=range(8), reads=("plain", "ns"), schedules=("cosine", "constant"),
            embedding_dim=32, steps=1000, batch=32, eval_every=50, valid_sequences=256)
