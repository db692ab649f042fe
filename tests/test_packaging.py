"""What a node install gets: setup.cfg lists every package of the project's
three import roots, and the wheel holds those and nothing from tests/ (the
harnesses, benchmarks and demo are for development machines only)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from setuptools.config.setupcfg import read_configuration

REPO = Path(__file__).resolve().parents[1]
# What the wheel is built from; tests/ is copied too, so that a setup.cfg that
# started picking it up would show in the wheel.
SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "cri_resmgr", "agent", "webhook", "tests")


def _options() -> dict:
    return read_configuration(str(REPO / "setup.cfg"))["options"]


def _packages_on_disk(package_dir: dict[str, str]) -> set[str]:
    found = set()
    for name, directory in package_dir.items():
        root = REPO / directory
        for init in root.rglob("__init__.py"):
            relative = init.parent.relative_to(root).parts
            if "__pycache__" not in relative:
                found.add(".".join((name, *relative)))
    return found


def test_setup_cfg_lists_every_package_and_no_test_code():
    options = _options()
    listed = set(options["packages"])
    assert listed == _packages_on_disk(options["package_dir"])
    assert not [p for p in listed if "test" in p or "harness" in p or "bench" in p]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Builds the wheel with the installed setuptools (no network, no build
    isolation) from a copy of the sources, so the checkout stays clean."""
    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    build = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", build, str(out)], cwd=src, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    wheel = out / done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_wheel_holds_no_harness_benchmark_or_test_module(wheel_names):
    modules = [n for n in wheel_names if n.endswith(".py")]
    assert not [n for n in modules if n.startswith("tests/") or "/testing/" in n]
    for harness_module in ("containerd.py", "kubelet.py", "kubeapi.py", "relayproc.py", "demo.py",
                           "sysfs.py", "cgroupfs.py", "podspec.py"):
        assert not [n for n in modules if n.endswith("/" + harness_module)], harness_module


def test_wheel_holds_every_layer(wheel_names):
    for module in ("cri_resmgr/cli.py", "cri_resmgr/relay/cli.py", "cri_resmgr/nri/cli.py",
                   "cri_resmgr/frontend/metrics.py", "cri_resmgr/transport/contract.py",
                   "cri_resmgr/transport/framerelay/relay.py", "cri_resmgr/engine/controller.py",
                   "cri_resmgr/config/service.py", "cri_resmgr/policy/static.py",
                   "cri_resmgr/topology/cpuallocator.py", "cri_resmgr/dump/dumper.py",
                   "cri_resmgr/_proto/runtime_v1_pb2.py", "cri_resmgr_agent/cli.py",
                   "cri_resmgr_webhook/cli.py"):
        assert module in wheel_names
