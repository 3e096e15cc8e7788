"""The ``nar-paper`` preset: the post's noisy-recall protocol, for a GPU.

Five (V, L) settings, learning rates {3e-4, 1e-3, 3e-3, 1e-2}, 24 seeds, the plain against the NS
read (cubic, 5 steps), AdamW (0.9, 0.999, weight decay 0.01), 2,000 steps of batch 64, cosine decay
and the constant-rate control; the full mLSTM (width 94, head dim 48): 1,920 runs. It refuses to
start on a CPU without ``--allow-cpu``.

    python -m experiments.sweep nar-paper --workers 1
"""

from experiments.studies.noisy_recall.arms import runs

NEEDS_CUDA = ("nar-paper is 1,920 runs of 2,000 steps at batch 64; on this CPU one NS step at batch 64, "
              "length 512 takes tens of seconds (about a day per NS run).")
SETTINGS = ((80, 512), (80, 768), (80, 1024), (96, 768), (96, 1024))
RUNS = runs(SETTINGS, lrs=(3e-4, 1e-3, 3e-3, 1e-2), seeds=range(24), schedules=("cosine", "constant"),
            steps=2000, batch=64, device="auto")
