"""``make gpu-wheels``: the wheels that the lent GPU machine's ``python3`` lacks for the device check.

That machine fetches nothing. Its image holds CPython 3.12 with ``IMAGE`` (and what they require);
``gpu_check.sh`` installs the carried wheels into a temporary folder there. Which distributions the
check needs is read from its imports, not listed by hand: ``ENTRY_MODULES`` are imported in a fresh
interpreter here, and every distribution a module they load comes from, outside the image's
packages and their requirements, is downloaded (``--no-deps``) at the version installed here, for
CPython 3.12 on manylinux x86-64 (pure-Python wheels are ``py3-none-any``).

    python -m experiments.bench.gpu_wheels [--out .whl] [--list] [--python-version 3.12]
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

from experiments.cli import CommandParser

IMAGE = ("torch", "triton", "numpy", "scipy", "pytest", "hypothesis", "tqdm", "matplotlib", "filelock")
ENTRY_MODULES = ("parity_tests.check", "parity_tests.harness", "experiments.bench.device_check")
GPU_PYTHON = "3.12"  # the image's python3
PLATFORM = ["--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--only-binary=:all:"]
PROJECT = "groupstate"


def normalized(name):
    """A distribution's name as pip compares them (``typing_extensions`` is ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def on_the_image(names=IMAGE):
    """``names`` and, transitively, every distribution they require as installed here (normalized)."""
    seen, todo = set(), list(names)
    while todo:
        name = normalized(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requirements = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def imported_distributions(modules=ENTRY_MODULES):
    """The distributions (normalized) of the modules that importing ``modules`` loads in a fresh
    interpreter, beyond those it loads at start-up; the project itself left out."""
    code = ("import importlib, json, sys; before = set(sys.modules); "
            "[importlib.import_module(m) for m in sys.argv[1:]]; "
            "print(json.dumps(sorted({m.partition('.')[0] for m in set(sys.modules) - before})))")
    result = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, check=True)
    owners = importlib.metadata.packages_distributions()
    tops = json.loads(result.stdout.splitlines()[-1])
    return sorted({normalized(d) for top in tops for d in owners.get(top, ())} - {PROJECT})


def needed_wheels(modules=ENTRY_MODULES):
    """``[name==version]``: what the device check imports that the image lacks, at the versions here."""
    image = on_the_image()
    return [f"{name}=={importlib.metadata.version(name)}" for name in imported_distributions(modules)
            if name not in image]


def download(pins, out, python_version=GPU_PYTHON):
    """``pip download`` ``pins`` for CPython ``python_version`` on manylinux x86-64 into ``out``; the
    wheels' paths."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--python-version",
                    python_version, *PLATFORM, "-d", str(out), *pins], check=True)
    names = {normalized(pin.partition("==")[0]) for pin in pins}
    return sorted(path for path in out.glob("*.whl") if normalized(path.name.split("-")[0]) in names)


def main(argv=None):
    parser = CommandParser("experiments.bench.gpu_wheels", __doc__)
    parser.add_argument("--out", type=Path, default=Path(".whl"), help="the folder of the wheels")
    parser.add_argument("--list", action="store_true", help="print the pins, download nothing")
    parser.add_argument("--python-version", default=GPU_PYTHON,
                        help="the CPython the wheels are for (the rehearsal's: this machine's)")
    args = parser.parse_args(argv)
    pins = needed_wheels()
    if args.list:
        print("\n".join(pins))
        return 0
    for path in download(pins, args.out, args.python_version):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
