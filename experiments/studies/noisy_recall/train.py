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
    if "-h" in argv or "--help" in argv:  # experiments.train's options for this model and task, under this name
        parser = train.build_parser("mlstm", "recall")
        parser.prog, parser.usage = "python -m experiments.studies.noisy_recall.train", "%(prog)s [--option value ...] [-h]"
        parser.description = (f"{' '.join(__doc__.split(chr(10) * 2)[0].replace('``', '').split())} Its options are experiments.train's "
                              f"for --model mlstm --task recall, after these defaults: {' '.join(option_argv(RECIPE))}.")
        parser.print_help()
        return 0
    return train.main(["--model", "mlstm", "--task", "recall", *option_argv(RECIPE), *argv],
                      prog="python -m experiments.studies.noisy_recall.train")


if __name__ == "__main__":
    raise SystemExit(main())
