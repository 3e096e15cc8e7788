"""The two trees mirror each other file by file and name by name (docs/design.md, Layout)."""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE, TORCH = ROOT / "reference", ROOT / "manifold_impl"

# Pieces with no twin, and why.
REFERENCE_ONLY_MODULES = {
    "config",  # shared by both trees (with checks, the modules manifold_impl may import from reference)
    "checks",  # checks of plain Python values, shared by both trees
    "params",  # parameter specs; torch keeps parameters in nn.Module state instead
}
TORCH_ONLY_MODULES = {
    "draws",  # draws on the generator's device (the reference has one device)
    "manifolds",  # geoopt adapters
    "precision",  # autocast regions (the reference computes in one precision)
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


SHARED_MODULES = ("reference.config", "reference.checks")  # what manifold_impl may import from reference


def test_reference_never_imports_torch_and_torch_imports_only_the_shared_modules():
    for path in REFERENCE.glob("*.py"):
        imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"torch", "geoopt"}, path.name
    for path in TORCH.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("reference"):
                assert node.module in SHARED_MODULES, path.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("reference") for a in node.names), path.name


# --- model classes ------------------------------------------------------------------------------
# Every class of the model modules has a twin with the same public methods and signatures, read
# through the two trees' conventions: the reference's methods take the parameter dict first
# (``params``) and a submodule is called through ``__call__`` where torch's nn.Module has
# ``forward``; parameters are set up by a spec in the reference and by the module in torch.

MODEL_MODULES = ("group_rnn", "group_transformer", "mlstm", "mixing", "readouts")
CLASSES_MIRRORED_ELSEWHERE = {
    "groups": "test_group_classes_have_identical_methods_and_signatures",
    "optim": "not mirrored class by class: torch's optimizers follow torch.optim.Optimizer (params, closure)",
}
REFERENCE_ONLY_METHODS = {"param_spec", "init_params", "check_params"}  # the parameter dict's spec
# nn.Module's parameters and repr hook; torch.compile of the fused recurrence's steps (nothing to compile in NumPy)
TORCH_ONLY_METHODS = {"reset_parameters", "load_state_dict", "extra_repr", "compile_steps"}
TORCH_ONLY_CONSTRUCTOR_ARGUMENTS = {"device", "dtype", "generator", "chunk_size", "checkpoint"}
KNOWN_CLASS_DIFFERENCES = {}  # {(module, class): why the twins differ} -> a strict xfail; none today


def defined_classes(module):
    """Public classes defined in ``module`` (not imported into it)."""
    return {name: member for name, member in inspect.getmembers(module, inspect.isclass)
            if member.__module__ == module.__name__ and not name.startswith("_")}


def own_methods(cls):
    """Public methods and properties the project defines on ``cls`` (not torch's), with the
    reference's ``__call__`` under torch's name ``forward``."""
    methods = {}
    for name, member in inspect.getmembers(cls):
        function = member.fget if isinstance(member, property) else member
        if not inspect.isfunction(function) or not function.__module__.startswith(("reference", "manifold_impl")):
            continue
        if name == "__call__":
            methods["forward"] = member
        elif not name.startswith("_"):
            methods[name] = member
    return methods


def model_class_pairs():
    pairs = []
    for module in MODEL_MODULES:
        reference = defined_classes(importlib.import_module(f"reference.{module}"))
        torch_twin = defined_classes(importlib.import_module(f"manifold_impl.{module}"))
        for name in sorted(reference):
            marks = ()
            if (module, name) in KNOWN_CLASS_DIFFERENCES:
                marks = pytest.mark.xfail(strict=True, reason=KNOWN_CLASS_DIFFERENCES[module, name])
            pairs.append(pytest.param(reference[name], torch_twin.get(name), id=f"{module}.{name}", marks=marks))
    return pairs


def test_every_module_with_classes_is_mirrored_class_by_class():
    for module in sorted(modules(REFERENCE) & modules(TORCH)):
        if defined_classes(importlib.import_module(f"reference.{module}")):
            assert module in MODEL_MODULES or module in CLASSES_MIRRORED_ELSEWHERE, module


@pytest.mark.parametrize("reference, torch_twin", model_class_pairs())
def test_model_classes_have_the_same_methods_and_signatures(reference, torch_twin):
    assert torch_twin is not None, f"no torch twin of {reference.__qualname__}"
    if issubclass(reference, tuple):  # NamedTuples (states, caches): the same fields in the same order
        assert reference._fields == torch_twin._fields
        return
    ours = {name: m for name, m in own_methods(reference).items() if name not in REFERENCE_ONLY_METHODS}
    theirs = {name: m for name, m in own_methods(torch_twin).items() if name not in TORCH_ONLY_METHODS}
    assert set(ours) == set(theirs)
    for name, member in ours.items():
        if isinstance(member, property):
            assert isinstance(theirs[name], property), name
            continue
        signature = parameters(member)
        if signature[1:2] == [("params", inspect.Parameter.POSITIONAL_OR_KEYWORD)]:
            signature = signature[:1] + signature[2:]  # the reference's parameter dict
        assert signature == parameters(theirs[name]), name
    constructor = [p for p in parameters(torch_twin.__init__) if p[0] not in TORCH_ONLY_CONSTRUCTOR_ARGUMENTS]
    assert parameters(reference.__init__) == constructor
