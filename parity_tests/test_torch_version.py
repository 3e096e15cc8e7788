"""The torch range: the package refuses a torch older than the one API that sets its bound, and
``pyproject.toml`` states the same bound."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import manifold_impl
from manifold_impl import TORCH_MINIMUM, check_torch_version

ROOT = Path(__file__).resolve().parents[1]


def test_the_api_that_sets_the_bound_is_in_this_torch():
    assert callable(torch.compiler.is_compiling)
    check_torch_version(torch.__version__)


@pytest.mark.parametrize("version", ["2.3.0", "2.3.0a0+git1234", "2.11.0+cu130", "2.13.0", "3.0.0rc1"])
def test_versions_at_or_above_the_bound_pass(version):
    check_torch_version(version)


@pytest.mark.parametrize("version", ["2.2.2", "2.1.0+cu121", "1.13.1"])
def test_an_older_torch_is_refused_in_one_line_naming_both_versions(version):
    with pytest.raises(ImportError) as error:
        check_torch_version(version)
    message = str(error.value)
    assert "\n" not in message and version in message and "torch>=2.3" in message


def test_pyproject_states_the_same_lower_bound():
    (lower,) = re.findall(r'^\s*"torch>=([\d.]+),', (ROOT / "pyproject.toml").read_text(), flags=re.M)
    assert tuple(int(p) for p in lower.split(".")) == TORCH_MINIMUM


def test_importing_the_package_under_an_old_torch_is_refused(tmp_path):
    """The check runs at import: a torch that reports 2.2.0 stops ``import manifold_impl``."""
    code = ("import torch; torch.__version__ = '2.2.0'\n"
            "try:\n    import manifold_impl\nexcept ImportError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused: groupstate needs torch >= 2.3"), out.stdout
    assert manifold_impl.TORCH_MINIMUM == TORCH_MINIMUM
