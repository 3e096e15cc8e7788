"""The ``nar-cpu`` preset: a noisy-recall study that a 2-core CPU finishes in about 40 minutes.

Scaled down from the post's protocol (experiments/sweeps/nar_paper.py) until an NS run fits in
about four minutes on one core:

* task V = 48 (16 keys, 16 values, 16 noise tokens), L = 64, frac_noise 0.8;
* model width 32 instead of 94: inner width 64, 4 heads of dimension 16 (instead of 48), so one NS
  read costs (16/48)³ ≈ 1/27 of the full model's — at width 94 one NS step at batch 32, length 64
  took 5.6 s on one core, 24× the width-32 step;
* 1,000 steps of batch 32, learning rate 1e-2 (the best of {3e-3, 1e-2} for the plain read in a
  pilot), validation every 50 steps on 256 fixed sequences;
* arms: plain read and NS read (cubic, 5 steps), each with cosine decay (the post's schedule) and
  with a constant rate (the schedule control); 8 seeds per arm, the same seeds in every arm.

In the pilot (2 seeds) the plain read at this size reached 0.77 with cosine decay at V = 48 and
stayed at chance (≈ 0.08) at width 32 with lr 3e-3.

    python -m experiments.sweep nar-cpu --workers 2 --out experiments/results/nar/cpu
    python -m experiments.report experiments/results/nar/cpu
"""

from experiments.sweeps.nar import runs

RUNS = runs([(48, 64)], lrs=(1e-2,), seeds=range(8), reads=("plain", "ns"), schedules=("cosine", "constant"),
            embedding_dim=32, steps=1000, batch=32, eval_every=50, valid_sequences=256)
