"""The VM suite's host side (docs/vm.md): boots the guest built by scripts/vm/build-image.sh
under qemu (TCG: this machine's /dev/kvm cannot run a stock kernel) with one NUMA topology,
the checkout shared read-only over virtio-9p at its own path and a results directory shared
read-write; the guest runs tests/vm/guest for that topology (scripts/vm/guest-run.sh), writes
its output, junit XML and exit status into the results directory and powers off.

One boot per topology runs all of that topology's guest tests. The guest is cgroup v2 only
(`systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all`), has a second virtio disk for block
I/O (/dev/vdb) and no network. The root disk is booted with `-snapshot`: the cached image is
never written, every boot starts from the same state.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "vm" / "build-image.sh"
QEMU = "qemu-system-x86_64"
# Where the guest mounts the results share (scripts/vm/guest/crirm-vm-start).
GUEST_RESULTS = "/run/crirm-results"
# TCG's "max" CPU says AuthenticAMD, and qemu describes an AMD part's L3 per NUMA node
# (CPUID 0x8000001D); as an Intel part (CPUID 4) one L3 spans the socket (die), as on the
# nodes whose topology text issue 33.3 is about.
CPU_MODEL = os.environ.get("CRIRM_VM_CPU", "max,vendor=GenuineIntel")
# The second disk, for block I/O classes: small, sparse on the host.
DATA_DISK_MB = 256


@dataclass(frozen=True)
class Node:
    cpus: str  # qemu's CPU indexes ("0-1"); "" for a memory-only node
    mem_mb: int


@dataclass(frozen=True)
class Topology:
    """A guest machine: qemu's -smp and one -numa node per entry of `nodes`."""

    name: str
    sockets: int
    cores: int  # per socket
    threads: int  # per core
    nodes: tuple[Node, ...]
    description: str

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores * self.threads

    @property
    def mem_mb(self) -> int:
        return sum(n.mem_mb for n in self.nodes)

    def qemu_args(self) -> list[str]:
        args = ["-smp", f"{self.cpus},sockets={self.sockets},cores={self.cores},threads={self.threads}",
                "-m", f"{self.mem_mb}M"]
        for i, node in enumerate(self.nodes):
            args += ["-object", f"memory-backend-ram,id=mem{i},size={node.mem_mb}M"]
            numa = f"node,nodeid={i},memdev=mem{i}"
            if node.cpus:
                numa += f",cpus={node.cpus}"
            args += ["-numa", numa]
        return args


# qemu numbers CPUs socket by socket, core by core, thread by thread: with 2 threads per core,
# CPUs 0-1 are one core's two threads, and the guest's kernel numbers them the same way.
TOPOLOGIES: dict[str, Topology] = {t.name: t for t in (
    Topology("2node", sockets=1, cores=4, threads=1, nodes=(Node("0-1", 768), Node("2-3", 768)),
             description="1 socket, 4 cores, 2 NUMA nodes of 2 CPUs"),
    Topology("4node", sockets=2, cores=2, threads=2,
             nodes=(Node("0-1", 512), Node("2-3", 512), Node("4-5", 512), Node("6-7", 512)),
             description="2 sockets, 2 cores per socket, 2 threads per core, 4 NUMA nodes of 1 core"),
    Topology("memonly", sockets=1, cores=2, threads=1,
             nodes=(Node("0", 1024), Node("1", 384), Node("", 512)),
             description="2 CPU nodes (one of 384 MiB) and a memory-only node"),
)}


@dataclass(frozen=True)
class GuestResult:
    topology: str
    rc: int | None  # the guest pytest's exit status; None: it never wrote one
    output: str  # the guest pytest's output
    console: str  # the serial console (kernel and systemd), for a guest that never ran pytest
    junit: Path | None
    qemu_rc: int | None
    timed_out: bool
    failed_logs: tuple[Path, ...] = ()  # the logs of failed tests' front ends (tests/vm/guest/conftest.py)

    def failures(self) -> list[str]:
        """The ids of failed or erroring guest tests, from the junit XML."""
        if self.junit is None or not self.junit.exists():
            return []
        out = []
        for case in ET.parse(self.junit).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                out.append(f"{case.get('classname')}::{case.get('name')}")
        return out

    def durations(self) -> list[tuple[str, float]]:
        """(test id, seconds in the guest) of every guest test, from the junit XML."""
        if self.junit is None or not self.junit.exists():
            return []
        return [(f"{case.get('classname')}::{case.get('name')}", float(case.get("time", "0")))
                for case in ET.parse(self.junit).getroot().iter("testcase")]

    def counts(self) -> dict[str, int]:
        """tests, failures, errors, skipped of the junit XML (empty without it)."""
        if self.junit is None or not self.junit.exists():
            return {}
        suite = ET.parse(self.junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")  # type: ignore[assignment]
        return {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}

    def report(self) -> str:
        head = (f"guest suite on {self.topology}: pytest exit {self.rc}, qemu exit {self.qemu_rc}"
                + (" (timed out: killed)" if self.timed_out else ""))
        parts = [head]
        if self.failures():
            parts.append("failed: " + ", ".join(self.failures()))
        parts.append("--- guest pytest output ---\n" + (self.output or "(none)"))
        for log in sorted(self.failed_logs):
            parts.append(f"--- {log} (tail) ---\n" + "\n".join(_read(log).splitlines()[-60:]))
        if self.rc is None or self.timed_out:
            parts.append("--- serial console (tail) ---\n" + "\n".join(self.console.splitlines()[-80:]))
        return "\n".join(parts)


def image_dir() -> Path:
    """Where the image for this checkout's inputs lives (built or not)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--dir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def image_ready(image: Path) -> bool:
    return all((image / f).exists() for f in (".complete", "vmlinux", "initrd.img", "rootfs.ext4", "venv"))


def missing_reason() -> str | None:
    """Why the VM suite cannot run on this machine (None: it can, once the image is built)."""
    if os.geteuid() != 0:
        return "needs root (the image build runs mmdebstrap and chroot)"
    if shutil.which(QEMU) is None:
        return f"{QEMU} is missing (scripts/install-deps.sh vm installs qemu-system-x86)"
    if shutil.which("mmdebstrap") is None and not image_ready(image_dir()):
        return "mmdebstrap is missing and no image is built (scripts/install-deps.sh vm installs it)"
    return None


def build_image(log: Path) -> Path:
    """Builds the image if needed (minutes on a fresh machine; nothing when cached)."""
    with open(log, "ab") as out:
        res = subprocess.run(["bash", str(BUILD_SCRIPT)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=out)
    if res.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"scripts/vm/build-image.sh failed ({res.returncode}):\n{tail}")
    return Path(res.stdout.decode().strip().splitlines()[-1])


def qemu_command(image: Path, topology: Topology, results: Path, src: Path = REPO) -> list[str]:
    cmdline = " ".join([
        "console=ttyS0", "root=/dev/vda", "rw", "panic=-1", "loglevel=5",
        # cgroup v2 alone: no v1 hierarchy may even be mounted.
        "systemd.unified_cgroup_hierarchy=1", "cgroup_no_v1=all",
        "systemd.show_status=0", "systemd.log_level=warning",
        f"crirm.src={src}",
    ])
    return [
        QEMU, "-accel", "tcg", "-cpu", CPU_MODEL, "-machine", "pc",
        *topology.qemu_args(),
        "-kernel", str(image / os.environ.get("CRIRM_VM_KERNEL", "vmlinux")), "-initrd", str(image / "initrd.img"), "-append", cmdline,
        # -snapshot: writes to both disks go to throwaway files, the image stays as built.
        "-snapshot",
        "-drive", f"file={image / 'rootfs.ext4'},if=virtio,format=raw",
        "-drive", f"file={results / 'data.img'},if=virtio,format=raw",
        "-virtfs", f"local,path={src},mount_tag=src,security_model=none,readonly=on",
        "-virtfs", f"local,path={results},mount_tag=results,security_model=none",
        "-nic", "none", "-display", "none", "-vga", "none", "-monitor", "none",
        "-serial", f"file:{results / 'console.log'}",
        "-no-reboot",
    ]


def run_guest_suite(image: Path, topology: Topology, results: Path, timeout: float,
                    pytest_args: Sequence[str] = ()) -> GuestResult:
    """One boot: the guest tests of `topology`; returns once the guest powered off (or was
    killed after `timeout` seconds)."""
    results.mkdir(parents=True, exist_ok=True)
    (results / "topology").write_text(topology.name + "\n")
    (results / "venv").write_text(str(image / "venv") + "\n")
    (results / "pytest-args").write_text("".join(a + "\n" for a in pytest_args))
    _precompile()
    with open(results / "data.img", "wb") as disk:
        disk.truncate(DATA_DISK_MB << 20)
    with open(results / "qemu.log", "wb") as log:
        proc = subprocess.Popen(qemu_command(image, topology, results), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    timed_out = False
    try:
        qemu_rc: int | None = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.kill(proc.pid, signal.SIGKILL)
        qemu_rc = proc.wait(30)
    rc_file = results / "rc"
    rc = int(rc_file.read_text().strip()) if rc_file.exists() and rc_file.read_text().strip() else None
    junit = results / "junit.xml"
    return GuestResult(
        topology=topology.name, rc=rc,
        output=_read(results / "output.txt"),
        console=_read(results / "console.log") + _read(results / "qemu.log"),
        junit=junit if junit.exists() else None, qemu_rc=qemu_rc, timed_out=timed_out,
        failed_logs=tuple(sorted((results / "failed").glob("*/**/*.log"))),
    )


def _precompile() -> None:
    """The checkout's byte code, made here with Debian's python3 (the guest's, the same magic
    number) into its __pycache__ directories, as any test run here does: the guest sees the
    checkout read-only, so it could not write them, and compiling the package and the tests
    for every process there costs minutes at TCG speed. (The guest's standard library and
    venv have theirs from their installation.)"""
    subprocess.run(["/usr/bin/python3", "-m", "compileall", "-q", "-j", "0", "cri_resmgr", "tests"], cwd=REPO,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
