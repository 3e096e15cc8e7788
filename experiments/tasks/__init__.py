"""Training tasks for ``experiments.train`` (the interface: ``experiments/tasks/base.py``) and the
synthetic generators behind them (NumPy only, seeded by an explicit ``numpy.random.Generator``).

Every module here that defines ``TASKS = {name: Task subclass}`` contributes its tasks to the
registry, so a new task is one new file.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil


@functools.cache
def task_classes():
    """``{name: Task subclass}`` over the modules of this package that define ``TASKS``."""
    found = {}
    for module_info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for name, task in getattr(module, "TASKS", {}).items():
            if name in found:
                raise ValueError(f"task {name!r} is defined twice: {found[name].__module__} and {module.__name__}")
            found[name] = task
    return found


def task_class(name):
    """The Task subclass registered as ``name``."""
    classes = task_classes()
    if name not in classes:
        raise ValueError(f"unknown task {name!r}; choose one of {sorted(classes)}")
    return classes[name]
