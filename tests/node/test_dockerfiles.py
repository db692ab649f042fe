"""The relay's and the agent's Dockerfiles, checked without an image build tool (none works
here): their COPY lines are carried out into a directory standing for the image, the
distribution their RUN line installs is built from what was copied, and what the image
then runs is compared with the DaemonSet and scripts/container-images.sh."""

from __future__ import annotations

import configparser
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from cri_resmgr.frontend.commandline import FALLBACK_CONFIG
from cri_resmgr.relay.cli import COMMAND

REPO = Path(__file__).resolve().parents[2]


def images_table() -> dict[str, str]:
    """Dockerfile -> image name, as scripts/container-images.sh builds them."""
    text = (REPO / "scripts/container-images.sh").read_text()
    pairs = re.search(r"^for pair in (.*); do$", text, re.M)
    assert pairs
    return {p.split(":", 1)[1]: p.split(":", 1)[0] for p in pairs.group(1).split()}


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    lines = (REPO / dockerfile).read_text().replace("\\\n", " ").splitlines()
    return [(line.split(None, 1)[0], line.split(None, 1)[1]) for line in lines
            if line.strip() and not line.startswith("#")]


class Image:
    """What the Dockerfile's COPY lines put where, under a directory standing for /."""

    def __init__(self, dockerfile: str, root: Path):
        self.root = root
        self.steps = instructions(dockerfile)
        for op, args in self.steps:
            if op == "COPY":
                *sources, dest = args.split()
                for source in sources:
                    self._copy(REPO / source, dest)

    def _copy(self, source: Path, dest: str) -> None:
        assert source.exists(), f"COPY {source.relative_to(REPO)}: not in the repository"
        target = self.root / dest.lstrip("/")
        if source.is_dir():  # Docker copies a directory's contents into dest
            shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        elif dest.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / source.name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)

    def last(self, op: str) -> list[str]:
        return json.loads([args for o, args in self.steps if o == op][-1])

    def pip_spec(self) -> str:
        run = next(args for op, args in self.steps if op == "RUN" and "pip install" in args)
        return re.search(r"pip install (?:--\S+ )*(\S+)", run).group(1).strip("\"'")

    def built_wheel(self, out: Path) -> zipfile.ZipFile:
        """The wheel pip would build from the pip spec's directory (setuptools here, no network)."""
        source = self.root / self.pip_spec().split("[")[0].lstrip("/")
        build = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"
        done = subprocess.run([sys.executable, "-c", build, str(out)], cwd=source, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return zipfile.ZipFile(out / done.stdout.strip().splitlines()[-1])


def console_scripts(wheel: zipfile.ZipFile) -> set[str]:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.read(name).decode())
    return set(entry_points["console_scripts"])


def requirements(wheel: zipfile.ZipFile) -> list[str]:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return [line.split(":", 1)[1].strip() for line in wheel.read(name).decode().splitlines()
            if line.startswith("Requires-Dist:")]


def unconditional(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~; ]", r)[0].lower() for r in reqs if "extra ==" not in r}


@pytest.fixture
def relay_image(tmp_path: Path) -> Image:
    return Image("cri_resmgr/Dockerfile", tmp_path / "image")


@pytest.fixture
def agent_image(tmp_path: Path) -> Image:
    return Image("agent/Dockerfile", tmp_path / "image")


def test_the_images_hold_the_sources_and_no_tests(relay_image, agent_image):
    for image in (relay_image, agent_image):
        src = image.root / "src"
        assert {p.name for p in src.iterdir()} == {"setup.cfg", "pyproject.toml", "README.md", "cri_resmgr", "agent",
                                                   "webhook"}
        assert (src / "cri_resmgr/_proto/runtime_v1_pb2.py").is_file()
        assert not list(src.rglob("test_*.py")) and not (src / "tests").exists()


def test_relay_image_installs_the_relay_alone_and_runs_it_with_the_sample_configuration(relay_image, tmp_path):
    assert relay_image.pip_spec() == "/src"  # no extras
    wheel = relay_image.built_wheel(tmp_path)
    assert relay_image.last("ENTRYPOINT") == ["cri-resmgr"]
    assert "cri-resmgr" in console_scripts(wheel)
    reqs = unconditional(requirements(wheel))
    assert "grpcio" in reqs and not reqs & {"kubernetes", "grpcio-tools"}
    # CMD is a command line the relay takes, and its fallback configuration is in the image.
    fallback = COMMAND.parse(relay_image.last("CMD"))[FALLBACK_CONFIG]
    in_image = relay_image.root / fallback.lstrip("/")
    assert in_image.read_text() == (REPO / "scripts/node/fallback.yaml").read_text()
    shown = subprocess.run([str(Path(sys.executable).parent / "cri-resmgr"), "-fallback-config", str(in_image),
                            "-print-config"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr


def test_agent_image_is_what_the_daemonset_runs(agent_image, tmp_path):
    daemonset = yaml.safe_load((REPO / "agent/deploy/agent-daemonset.yaml").read_text())
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].split(":")[0] == images_table()["agent/Dockerfile"] == "cri-resmgr-agent"
    assert agent_image.pip_spec() == "/src[agent]"
    wheel = agent_image.built_wheel(tmp_path)
    command = container["command"][0]
    assert agent_image.last("ENTRYPOINT") == [command]
    assert container["readinessProbe"]["exec"]["command"][0] == command
    assert command in console_scripts(wheel)
    reqs = requirements(wheel)
    assert any(r.startswith("kubernetes") and 'extra == "agent"' in r for r in reqs)
    assert "grpcio-tools" not in unconditional(reqs)
    # A read-only root filesystem: Python must not try to write bytecode.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert any(op == "ENV" and "PYTHONDONTWRITEBYTECODE=1" in args for op, args in agent_image.steps)


def test_every_image_has_a_dockerfile_and_the_webhook_keeps_its_name():
    table = images_table()
    assert set(table) == {"cri_resmgr/Dockerfile", "webhook/Dockerfile", "agent/Dockerfile"}
    assert all((REPO / dockerfile).is_file() for dockerfile in table)
    deployment = yaml.safe_load((REPO / "webhook/deploy/deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].split(":")[0] == \
        table["webhook/Dockerfile"]
