"""The device check's plumbing, rehearsed on the CPU: its wheels, and gpu_check.sh --cpu run by an
interpreter that sees only the GPU image's packages and the carried wheels."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.bench import gpu_wheels

ROOT = Path(__file__).resolve().parent.parent

# The GPU image's python3, emulated: a top-level module of a distribution that is neither on the
# image nor the project's is found only outside this interpreter's own site-packages (in the
# folder gpu_check.sh installs the wheels into), else it is missing, as it is there.
IMAGE_ONLY = '''
import importlib.machinery, importlib.metadata, json, os, re, site, sys
ALLOWED = set(json.loads(os.environ["GPU_IMAGE_DISTRIBUTIONS"]))
OWNERS = importlib.metadata.packages_distributions()
OWN_SITE = set(site.getsitepackages())

class OffTheImage:
    @staticmethod
    def find_spec(name, path=None, target=None):
        owners = {re.sub(r"[-_.]+", "-", d).lower() for d in OWNERS.get(name, ())}
        if path is not None or not owners or owners & ALLOWED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if p not in OWN_SITE])
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU image)", name=name)
        return spec

sys.meta_path.insert(0, OffTheImage)
'''


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """The device check's wheels, for this machine's Python (the GPU machine's are for 3.12)."""
    out = tmp_path_factory.mktemp("whl")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert gpu_wheels.main(["--out", str(out), "--python-version", version]) == 0
    return out


def test_the_wheels_are_what_the_check_imports_off_the_image():
    pins = gpu_wheels.needed_wheels()
    names = {pin.partition("==")[0] for pin in pins}
    assert {"geoopt", "autograd"} <= names
    assert not names & gpu_wheels.on_the_image()  # torch, numpy, ... and what they require are there
    assert "geoopt==0.5.1" in pins and "autograd==1.9.1" in pins  # pyproject.toml's pins


def rehearse(wheels, out, tmp_path, pip=True):
    """Run gpu_check.sh --cpu on the emulated image (``pip``: whether it has pip)."""
    customize = tmp_path / "image_only"
    customize.mkdir(exist_ok=True)
    (customize / "sitecustomize.py").write_text(IMAGE_ONLY)
    image = sorted(gpu_wheels.on_the_image() | ({"pip"} if pip else set()))
    env = {**os.environ, "PY": sys.executable, "WHEELS": str(wheels), "OUT": str(out), "PYTHONPATH": str(customize),
           "GPU_IMAGE_DISTRIBUTIONS": json.dumps(image)}
    return subprocess.run(["bash", "experiments/gpu_check.sh", "--cpu"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_gpu_check_runs_on_the_cpu_with_only_the_images_packages_and_the_wheels(wheels, tmp_path):
    result = rehearse(wheels, tmp_path / "out", tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    versions = json.loads(result.stdout.splitlines()[0])
    assert versions["torch"] and versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert (tmp_path / "out" / "parity.txt").read_text().split() == [
        "group_rnn-U-float32", "pass", "group_transformer-O-float64", "pass", "mlstm-ns-float32", "pass", "ddp-gloo-world1", "pass",
        "train-bf16", "pass"]
    assert json.loads((tmp_path / "out" / "ddp_world1" / "config.json").read_text())["world_size"] == 1
    record = json.loads((tmp_path / "out" / "device_check_quick.json").read_text())
    assert record["machine"]["torch"] == versions["torch"] and "cuda" in record["machine"]


def test_the_rehearsal_fails_without_a_wheel_the_image_lacks(wheels, tmp_path):
    """The emulated image has teeth: without geoopt's wheel, nothing that imports it runs (the other
    wheels unpacked, on an image without pip)."""
    partial = tmp_path / "partial"
    partial.mkdir()
    for wheel in wheels.glob("*.whl"):
        if not wheel.name.startswith("geoopt-"):
            (partial / wheel.name).symlink_to(wheel)
    result = rehearse(partial, tmp_path / "out", tmp_path, pip=False)
    assert result.returncode != 0
    assert "No module named 'geoopt' (not on the GPU image)" in (tmp_path / "out" / "parity.log").read_text()
