"""The two trees mirror each other file by file and name by name (SPEC §0)."""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE, TORCH = ROOT / "reference", ROOT / "manifold_impl"

# Pieces with no twin, and why.
REFERENCE_ONLY_MODULES = {
    "config",  # shared by both trees (the one module manifold_impl may import from reference)
    "params",  # parameter specs; torch keeps parameters in nn.Module state instead
}
TORCH_ONLY_MODULES = {
    "manifolds",  # geoopt adapters
}
REFERENCE_ONLY_NAMES = {
    "optim": {"ambient_gradients"},  # converts autograd's conjugated complex gradients
}


def modules(tree):
    return {path.stem for path in tree.glob("*.py") if path.stem != "__init__"}


def public_names(path):
    """Top-level functions, classes and assignments not starting with '_', plus ``__all__``."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    if target.id == "__all__":
                        names |= set(ast.literal_eval(node.value))
                    else:
                        names.add(target.id)
    return {name for name in names if not name.startswith("_")}


def test_same_module_files():
    assert modules(REFERENCE) - REFERENCE_ONLY_MODULES == modules(TORCH) - TORCH_ONLY_MODULES


@pytest.mark.parametrize("module", sorted(modules(REFERENCE) & modules(TORCH)))
def test_same_public_names(module):
    reference = public_names(REFERENCE / f"{module}.py") - REFERENCE_ONLY_NAMES.get(module, set())
    assert reference == public_names(TORCH / f"{module}.py")


def public_methods(cls):
    return {name: member for name, member in inspect.getmembers(cls) if not name.startswith("_")
            and (inspect.isfunction(member) or isinstance(member, property))}


def parameters(function):
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("name", ["O", "SO", "U", "SU", "T", "BO", "GL"])
def test_group_classes_have_identical_methods_and_signatures(name):
    reference = importlib.import_module("reference.groups").GROUPS[name]
    torch_twin = importlib.import_module("manifold_impl.groups").GROUPS[name]
    assert reference.__name__ == torch_twin.__name__
    ours, theirs = public_methods(reference), public_methods(torch_twin)
    assert set(ours) == set(theirs)
    for method, member in ours.items():
        if inspect.isfunction(member):
            assert parameters(member) == parameters(theirs[method]), method
    assert parameters(reference.__init__) == parameters(torch_twin.__init__)


def test_reference_never_imports_torch_and_torch_imports_only_the_config():
    for path in REFERENCE.glob("*.py"):
        imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"torch", "geoopt"}, path.name
    for path in TORCH.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("reference"):
                assert node.module == "reference.config", path.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("reference") for a in node.names), path.name
