"""The noisy-recall recipe (SPEC §6) as a preset of the training loop: ``python -m experiments.recall ...``.

    python -m experiments.recall --vocab-size 80 --length 512 --read ns --steps 2000 --lr 1e-3 --seed 0 --run-dir R

is ``python -m experiments.train --model mlstm --task recall`` with the post's optimization as
defaults (``experiments.tasks.recall.RECIPE``: 2,000 steps of batch 64, AdamW with weight decay
0.01, no gradient clipping, no warm-up, cosine decay, validation every 100 steps); every later
``--key value`` overrides them, and the run is an ordinary ``experiments.train`` run (resumable,
same files).
"""

from __future__ import annotations

import sys

from experiments import train
from experiments.sweep_run import option_argv
from experiments.tasks.recall import RECIPE


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    return train.main(["--model", "mlstm", "--task", "recall", *option_argv(RECIPE), *argv])


if __name__ == "__main__":
    raise SystemExit(main())
