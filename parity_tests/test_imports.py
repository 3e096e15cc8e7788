"""The project's import graph has no cycle.

Edges: every ``import`` and ``from ... import`` in a project module, at any depth (also inside
functions), to the project module it names (``from a.b import c`` points at ``a.b.c`` when that is a
module, else at ``a.b``), plus the imports the registries make by name at run time (sweep presets,
task modules, model classes). A package's ``__init__`` importing its own submodules is the usual
layout, so the implicit edge from a submodule to its parent package is not counted.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reference", "manifold_impl", "experiments", "parity_tests")


def project_modules():
    """``{dotted name: path}`` of every Python module of the project's packages."""
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_names(module, path):
    """Dotted names imported anywhere in ``path`` (relative imports resolved against ``module``)."""
    is_package = path.name == "__init__.py"
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
            names.append(base)
    return names


def registry_edges():
    """Imports made by name at run time: preset sweeps, task modules, model classes."""
    from experiments.models import _BY_CONFIG
    from experiments.sweeps import PRESETS

    edges = {("experiments.sweeps", module) for module in PRESETS.values()}
    edges |= {("experiments.tasks", f"experiments.tasks.{path.stem}")
              for path in (ROOT / "experiments" / "tasks").glob("*.py") if path.stem != "__init__"}
    edges |= {("experiments.models", entry.module_class.partition(":")[0]) for entry in _BY_CONFIG.values()}
    return edges


def import_graph():
    modules = project_modules()
    graph = {name: set() for name in modules}
    for module, path in modules.items():
        for name in imported_names(module, path):
            if name in modules and name != module and not module.startswith(name + "."):
                graph[module].add(name)
            elif name.rpartition(".")[0] in modules and name.rpartition(".")[0] != module:
                parent = name.rpartition(".")[0]
                if not module.startswith(parent + "."):
                    graph[module].add(parent)
    for source, target in registry_edges():
        assert target in modules, target
        graph[source].add(target)
    return graph


def find_cycle(graph):
    """One cycle of ``graph`` (``{node: successors}``) as a list of nodes, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                return stack[stack.index(successor):] + [successor]
            if successor not in state:
                cycle = visit(successor)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert {"experiments.train", "experiments.sweep", "experiments.sweep_run"} <= set(graph)
    assert "experiments.training.loop" in graph["experiments.sweep"]  # the graph sees real edges
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("module", ["experiments.sweep_run", "experiments.tasks.base"])
def test_leaf_modules_import_nothing_of_the_experiments(module):
    graph = import_graph()
    assert not {name for name in graph[module] if name.startswith("experiments")}, graph[module]
