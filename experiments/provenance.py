"""What a run directory records about how it was made: the command line and the git revision."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def git_revision():
    """The checkout's HEAD commit, or ``unknown`` outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_provenance(directory, module, argv):
    """``command.txt`` (``python -m module argv...``) and ``git_revision.txt`` in ``directory``."""
    directory = Path(directory)
    (directory / "command.txt").write_text(" ".join([sys.executable, "-m", module, *argv]) + "\n")
    (directory / "git_revision.txt").write_text(git_revision() + "\n")
