"""One noisy-recall run with the post's optimization as defaults (``experiments.tasks.recall.RECIPE``).

    python -m experiments.studies.noisy_recall.train --vocab-size 80 --length 512 --read ns --seed 0 --run-dir R

is ``python -m experiments.train --model mlstm --task recall`` with ``RECIPE``'s options first;
every later ``--key value`` overrides them, and the run is an ordinary, resumable training run.
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
