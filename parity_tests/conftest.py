import pytest

from parity_tests.backends import BACKEND_IDS, BACKENDS
from parity_tests.tolerances import GROUP_ATOL
from reference.groups import GROUPS

# (name, n, block) cases of the group contract: every group at n ∈ {1, 2, 3, 5}; BO at sizes its
# block divides.
GROUP_CASES = [(name, n, None) for name in GROUPS if name != "BO" for n in (1, 2, 3, 5)]
GROUP_CASES += [("BO", 1, 1), ("BO", 2, 2), ("BO", 4, 2), ("BO", 6, 3)]
GROUP_CASE_IDS = [f"{name}{n}" + (f"b{block}" if block else "") for name, n, block in GROUP_CASES]

COMPACT_CASES = [case for case in GROUP_CASES if GROUPS[case[0]].is_compact]
COMPACT_CASE_IDS = [i for case, i in zip(GROUP_CASES, GROUP_CASE_IDS) if GROUPS[case[0]].is_compact]

BATCH_SHAPES = [(), (1,), (3,), (2, 3)]
BATCH_IDS = ["b()", "b(1,)", "b(3,)", "b(2,3)"]


@pytest.fixture(params=BACKENDS, ids=BACKEND_IDS)
def backend(request):
    return request.param


@pytest.fixture(params=GROUP_CASES, ids=GROUP_CASE_IDS)
def group_case(request):
    return request.param


@pytest.fixture(params=COMPACT_CASES, ids=COMPACT_CASE_IDS)
def compact_case(request):
    return request.param


@pytest.fixture
def atol(backend):
    return GROUP_ATOL[backend.dtype]
