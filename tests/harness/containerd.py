"""A throwaway containerd whose every file lives under one directory.

`Containerd(base_dir)` writes its own config (root, state, socket, runc root,
CNI dirs, opt dir, all under `base_dir`), starts the daemon, waits until it
answers CRI `Version`, and imports the locally built busybox and pause images.
`stop()` tears everything down: daemon, containers (through runc, on this
instance's runc root only), shims whose command line names this instance's
socket, mounts under `base_dir`, cgroups this instance owns, and `base_dir`
itself.  A containerd the machine already runs is never touched: nothing here
uses /run/containerd/containerd.sock, /var/lib/containerd or
/etc/containerd/config.toml (containerd 1.6 does put shim sockets under
/run/containerd/s; only the ones named in this instance's bundles are removed).

`python -m tests.harness.containerd up|down|restart DIR` is what
scripts/containerd-up.sh and scripts/containerd-down.sh run.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import grpc

from tests.harness import cgroupfs, images, runtimes

NAMESPACE = "k8s.io"
_CONFIG_MARKER = "# cri-resmgr throwaway containerd"
_SYSTEM_PATHS = ("/", "/run", "/var", "/var/lib", "/run/containerd", "/var/lib/containerd", "/etc/containerd")
# sun_path holds 108 bytes including the NUL; containerd also listens on
# "<socket>.ttrpc".
_MAX_SOCKET_LEN = 107 - len(".ttrpc")
_SHIM_SOCKET_DIR = "/run/containerd/s/"
_TASK_STATE = "io.containerd.runtime.v2.task"
# The runtime handler whose `runc start` a test can hold (Containerd.hold_start).
GATED_RUNTIME = "crirm-gated"
# The longest a held start waits for its release: a test that dies holding one
# must not leave containerd's StartContainer hanging for ever.
_GATE_MAX_SECONDS = 60


def gated_runc_script(runc: str, gate_dir: Path) -> str:
    """runc, except that `runc ... start ID` waits while gate_dir/ID exists; it
    marks gate_dir/ID.held once it waits. By then containerd has created the task
    from the container's spec (`runc create`) and has not yet marked the
    container started: the window of a StartContainer in flight."""
    return f"""#!/bin/sh
gate={json.dumps(str(gate_dir))}
sub="" last=""
for a in "$@"; do
  case "$a" in start|create|run|delete|kill|state|update|exec|ps|pause|resume|checkpoint|restore|events) \
    [ -z "$sub" ] && sub="$a";; esac
  last="$a"
done
if [ "$sub" = start ] && [ -e "$gate/$last" ]; then
  : > "$gate/$last.held"
  n=0
  while [ -e "$gate/$last" ] && [ $n -lt {_GATE_MAX_SECONDS * 50} ]; do sleep 0.02; n=$((n + 1)); done
fi
exec {json.dumps(runc)} "$@"
"""


class ContainerdError(RuntimeError):
    pass


class Layout:
    """Where one instance keeps each of its files; pure path arithmetic."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir).absolute()
        self.config = self.base_dir / "config.toml"
        self.socket = self.base_dir / "containerd.sock"
        self.pid_file = self.base_dir / "containerd.pid"
        self.log = self.base_dir / "containerd.log"
        self.root = self.base_dir / "root"
        self.state = self.base_dir / "state"
        self.runc_root = self.base_dir / "runc"
        self.cni_conf = self.base_dir / "cni" / "net.d"
        self.cni_bin = self.base_dir / "cni" / "bin"
        self.opt = self.base_dir / "opt"
        self.cgroup_roots_file = self.base_dir / "cgroup-roots"
        self.images_stamp = self.base_dir / "images-imported"
        self.snapshotter_file = self.base_dir / "snapshotter"
        # NRI (containerd 1.7+, when enabled): the socket external plugins dial, the
        # directory of plugins the runtime launches at its start, and their configurations.
        self.nri_socket = self.base_dir / "nri.sock"
        self.nri_plugins = self.base_dir / "nri" / "plugins"
        self.nri_conf = self.base_dir / "nri" / "conf.d"
        # The "crirm-gated" runtime handler's runc: `runc start ID` waits while
        # gate/ID exists (tests hold a StartContainer in flight; see `Containerd.hold_start`).
        self.gated_runc = self.base_dir / "runc-gated"
        self.gate_dir = self.base_dir / "gate"


def _nri_section(layout: Layout, table: str, q: Callable[[object], str], nri: bool) -> str:
    if not nri:
        return ""
    return f"""
  # NRI: external plugins dial the socket; the runtime launches the plugins in
  # plugin_path once, at its own start.
  [{table}]
    disable = false
    disable_connections = false
    socket_path = {q(layout.nri_socket)}
    plugin_path = {q(layout.nri_plugins)}
    plugin_config_path = {q(layout.nri_conf)}
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "2s"
"""


def render_config(layout: Layout, snapshotter: str, sandbox_image: str = images.PAUSE_IMAGE,
                  major: int = 1, nri: bool = False, systemd_cgroup: bool = False) -> str:
    """The containerd config for an instance under `layout`: version 2 for 1.6 and 1.7,
    version 3 for 2.x (`major`); NRI enabled when `nri` (1.7+); runc's systemd cgroup driver
    when `systemd_cgroup` (pods' cgroup parents are then slices: Kubelet(cgroup_driver="systemd"))."""
    sd = "true" if systemd_cgroup else "false"
    if major >= 2:
        return _render_config_v3(layout, snapshotter, sandbox_image, nri, sd)

    def q(value: object) -> str:
        return json.dumps(str(value))  # a JSON string is a valid TOML basic string

    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""{_CONFIG_MARKER}; generated by tests.harness.containerd
version = 2
root = {q(layout.root)}
state = {q(layout.state)}
oom_score = 0
# Snapshotters nobody here uses; some probe the host at start.  (The
# runtime.v1.linux plugin must stay: 1.6's tasks service, hence CRI, needs it.)
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = {q(layout.socket)}
  uid = 0
  gid = 0

[ttrpc]
  address = {q(str(layout.socket) + ".ttrpc")}

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  # Its default lives under /var/lib/containerd.
  [plugins."io.containerd.internal.v1.opt"]
    path = {q(layout.opt)}

  [{cri}]
    sandbox_image = {q(sandbox_image)}
    # The VM withholds CAP_SYS_RESOURCE even from root: without this, runc
    # fails to lower oom_score_adj and RunPodSandbox dies with
    # "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    enable_selinux = false
    disable_apparmor = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

    [{cri}.containerd]
      snapshotter = {q(snapshotter)}
      default_runtime_name = "runc"

      [{cri}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [{cri}.containerd.runtimes.runc.options]
          SystemdCgroup = {sd}
          Root = {q(layout.runc_root)}

      # runc behind a gate (GATED_RUNTIME): pods that ask for it by runtime_handler
      # can have a container's start held while a test does something else.
      [{cri}.containerd.runtimes.{GATED_RUNTIME}]
        runtime_type = "io.containerd.runc.v2"

        [{cri}.containerd.runtimes.{GATED_RUNTIME}.options]
          SystemdCgroup = {sd}
          Root = {q(layout.runc_root)}
          BinaryName = {q(layout.gated_runc)}

    # No CNI is installed; host-network sandboxes never call it, and an empty
    # conf dir only makes the CRI report NetworkReady=false.
    [{cri}.cni]
      bin_dir = {q(layout.cni_bin)}
      conf_dir = {q(layout.cni_conf)}
{_nri_section(layout, 'plugins."io.containerd.nri.v1.nri"', q, nri)}"""


def _render_config_v3(layout: Layout, snapshotter: str, sandbox_image: str, nri: bool, sd: str) -> str:
    """containerd 2.x: the CRI plugin split into runtime and images plugins."""

    def q(value: object) -> str:
        return json.dumps(str(value))

    rt, im = "plugins.'io.containerd.cri.v1.runtime'", "plugins.'io.containerd.cri.v1.images'"
    nri_part = _nri_section(layout, "plugins.'io.containerd.nri.v1.nri'", q, nri) if nri else """
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
"""
    return f"""{_CONFIG_MARKER}; generated by tests.harness.containerd
version = 3
root = {q(layout.root)}
state = {q(layout.state)}
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = {q(layout.socket)}
  uid = 0
  gid = 0

[ttrpc]
  address = {q(str(layout.socket) + ".ttrpc")}

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = {q(layout.opt)}

  [{im}]
    snapshotter = {q(snapshotter)}
    [{im}.pinned_images]
      sandbox = {q(sandbox_image)}

  [{rt}]
    restrict_oom_score_adj = true
    enable_selinux = false
    disable_apparmor = true

    [{rt}.containerd]
      default_runtime_name = "runc"
      [{rt}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [{rt}.containerd.runtimes.runc.options]
          SystemdCgroup = {sd}
          Root = {q(layout.runc_root)}
      # runc behind a gate (GATED_RUNTIME), as in the 1.x configuration.
      [{rt}.containerd.runtimes.{GATED_RUNTIME}]
        runtime_type = "io.containerd.runc.v2"
        [{rt}.containerd.runtimes.{GATED_RUNTIME}.options]
          SystemdCgroup = false
          Root = {q(layout.runc_root)}
          BinaryName = {q(layout.gated_runc)}

    [{rt}.cni]
      bin_dirs = [{q(layout.cni_bin)}]
      conf_dir = {q(layout.cni_conf)}

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
{nri_part}"""


class Containerd:
    """One throwaway containerd under `base_dir`.

    `owned_cgroup_roots` are cgroup paths (e.g. "/crirm-test-1a2b") that this
    instance's pods live under and that nothing else uses: `stop()` kills
    what is left in them and removes them from every cgroup hierarchy.
    """

    namespace = NAMESPACE
    pause_image = images.PAUSE_IMAGE
    busybox_image = images.BUSYBOX_IMAGE

    def __init__(
        self,
        base_dir: Path,
        *,
        owned_cgroup_roots: Sequence[str] = (),
        image_cache_dir: Path | None = None,
        snapshotter: str | None = None,
        containerd_bin: str = "containerd",
        ctr_bin: str = "ctr",
        runc_bin: str = "runc",
        bin_dir: Path | None = None,
        major: int = 1,
        nri: bool = False,
        version: str = "",
        systemd_cgroup: bool = False,
    ) -> None:
        """`bin_dir`: where another release's containerd, ctr and shim are (its shim is
        found on PATH, so the directory goes first there); `major`: its major version
        (2: config version 3); `nri`: NRI enabled, on `layout.nri_socket`."""
        self.layout = Layout(base_dir)
        _refuse_system_path(self.layout.base_dir)
        if len(str(self.layout.socket)) > _MAX_SOCKET_LEN:
            raise ValueError(
                f"base_dir {self.layout.base_dir} is too long for a unix socket path "
                f"(socket must be at most {_MAX_SOCKET_LEN} characters)"
            )
        for root in owned_cgroup_roots:
            _check_cgroup_root(root)
        self.owned_cgroup_roots = tuple(owned_cgroup_roots)
        self.image_cache_dir = image_cache_dir
        self.snapshotter = snapshotter
        self.bin_dir = Path(bin_dir) if bin_dir is not None else None
        self._containerd_bin = str(self.bin_dir / "containerd") if self.bin_dir else containerd_bin
        self._ctr_bin = str(self.bin_dir / "ctr") if self.bin_dir else ctr_bin
        self._runc_bin = runc_bin
        self.major = major
        self.nri = nri
        self.version = version  # for test ids and messages; "" for the system's
        self.systemd_cgroup = systemd_cgroup
        self._proc: subprocess.Popen | None = None

    @property
    def base_dir(self) -> Path:
        return self.layout.base_dir

    @property
    def socket(self) -> Path:
        return self.layout.socket

    @property
    def address(self) -> str:
        """The gRPC target for this instance's CRI socket."""
        return f"unix://{self.layout.socket}"

    @property
    def pid(self) -> int | None:
        return _read_pid(self.layout)

    def is_running(self) -> bool:
        pid = self.pid
        return pid is not None and _is_our_daemon(pid, self.layout)

    def start(self, timeout: float = 30.0) -> None:
        """Starts the daemon and returns once it answers CRI Version with the
        test images imported."""
        if self.is_running():
            raise ContainerdError(f"containerd under {self.base_dir} is already running (pid {self.pid})")
        lay = self.layout
        for d in (lay.base_dir, lay.root, lay.state, lay.runc_root, lay.cni_conf, lay.cni_bin, lay.opt,
                  *((lay.nri_plugins, lay.nri_conf) if self.nri else ())):
            d.mkdir(parents=True, exist_ok=True)
        lay.cgroup_roots_file.write_text("".join(r + "\n" for r in self.owned_cgroup_roots))
        if self.snapshotter is None and lay.snapshotter_file.exists():
            self.snapshotter = lay.snapshotter_file.read_text().strip()  # a restart keeps its snapshots
        if self.snapshotter is None:
            self.snapshotter = "overlayfs" if overlay_supported(lay.base_dir) else "native"
        lay.snapshotter_file.write_text(self.snapshotter + "\n")
        lay.config.write_text(render_config(lay, self.snapshotter, major=self.major, nri=self.nri,
                                           systemd_cgroup=self.systemd_cgroup))
        lay.gate_dir.mkdir(exist_ok=True)
        runc = shutil.which(self._runc_bin) or self._runc_bin
        lay.gated_runc.write_text(gated_runc_script(runc, lay.gate_dir))
        lay.gated_runc.chmod(0o755)
        lay.socket.unlink(missing_ok=True)
        env = None
        if self.bin_dir is not None:
            env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}
        with open(lay.log, "ab") as log:
            self._proc = subprocess.Popen(
                [self._containerd_bin, "--config", str(lay.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # Own session: a Ctrl-C aimed at the test run must not kill the
                # daemon before the teardown does it in order.
                start_new_session=True,
            )
        lay.pid_file.write_text(f"{self._proc.pid}\n")
        self._wait_ready(timeout)
        self._import_images()

    def stop_daemon(self, timeout: float = 10.0) -> None:
        """Stops only the daemon: state, shims and containers survive, so a
        later `start()` on the same directory picks them up again."""
        _stop_daemon(self.layout, timeout)
        if self._proc is not None:
            self._proc.wait(timeout=timeout)  # reap
            self._proc = None

    def restart(self, timeout: float = 30.0) -> None:
        self.stop_daemon()
        self.start(timeout)

    def stop(self) -> None:
        """Tears down everything this instance made and removes `base_dir`."""
        try:
            lay = self.layout
            if lay.base_dir.is_dir() and not lay.config.exists() and not mounts_under(lay.base_dir):
                shutil.rmtree(lay.base_dir)  # start() failed before writing anything that runs
                return
            teardown(self.base_dir, runc_bin=self._runc_bin, extra_cgroup_roots=self.owned_cgroup_roots)
        finally:
            if self._proc is not None:
                self._proc.wait(timeout=10)
                self._proc = None

    def shim_pids(self) -> list[int]:
        return _shim_pids(self.layout)

    def mounts(self) -> list[str]:
        """Mount points at or under `base_dir`, in mount order."""
        return mounts_under(self.base_dir)

    def hold_start(self, container_id: str) -> None:
        """The next `runc start` of this container (a pod of the GATED_RUNTIME
        handler) waits until `release_start`."""
        (self.layout.gate_dir / container_id).touch()

    def wait_held(self, container_id: str, timeout: float = 20.0) -> None:
        """Returns once the held start is waiting at the gate."""
        held = self.layout.gate_dir / f"{container_id}.held"
        deadline = time.monotonic() + timeout
        while not held.exists():
            if time.monotonic() > deadline:
                raise ContainerdError(f"the start of {container_id[:12]} never reached the gate within {timeout}s")
            time.sleep(0.02)

    def release_start(self, container_id: str) -> None:
        (self.layout.gate_dir / container_id).unlink(missing_ok=True)
        (self.layout.gate_dir / f"{container_id}.held").unlink(missing_ok=True)

    def ctr(self, *args: str, timeout: float = 60.0) -> str:
        """Runs `ctr` against this instance in the CRI namespace; returns stdout."""
        cmd = [self._ctr_bin, "-a", str(self.socket), "-n", self.namespace, *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise ContainerdError(f"{' '.join(cmd)} failed: {res.stderr.strip()}")
        return res.stdout

    def __enter__(self) -> Containerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error = "socket not created"
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise ContainerdError(
                    f"containerd exited with status {self._proc.returncode} during start; "
                    f"log tail:\n{_tail(self.layout.log)}"
                )
            if self.socket.exists():
                try:
                    if cri_version(self.address, timeout=2.0):
                        return
                except grpc.RpcError as e:
                    last_error = f"{e.code()}: {e.details()}"
                    if e.code() == grpc.StatusCode.UNIMPLEMENTED and "failed to load plugin io.containerd.grpc.v1.cri" in _tail(self.layout.log, 10_000):
                        raise ContainerdError(
                            f"containerd under {self.base_dir} runs without its CRI plugin; log tail:\n{_tail(self.layout.log)}"
                        ) from None
            if time.monotonic() > deadline:
                raise ContainerdError(
                    f"containerd under {self.base_dir} did not answer CRI Version within {timeout}s "
                    f"({last_error}); log tail:\n{_tail(self.layout.log)}"
                )
            time.sleep(0.05)

    def _import_images(self) -> None:
        tar = images.ensure_images_tar(self.image_cache_dir)
        stamp = f"{tar.name} {self.snapshotter}"
        lay = self.layout
        if not (lay.images_stamp.exists() and lay.images_stamp.read_text() == stamp):
            self.ctr("images", "import", "--snapshotter", str(self.snapshotter), str(tar))
            lay.images_stamp.write_text(stamp)
        # The CRI image store learns of imported images from events, i.e.
        # asynchronously: wait until it resolves both names.
        deadline = time.monotonic() + 10
        for name in (images.BUSYBOX_IMAGE, images.PAUSE_IMAGE):
            while not cri_image_present(self.address, name):
                if time.monotonic() > deadline:
                    raise ContainerdError(f"CRI does not see imported image {name}")
                time.sleep(0.05)


# --- tiny CRI probes ------------------------------------------------------
# Hand-encoded so that this module needs no generated CRI code: both requests
# are a string field nested at most once.


def _pb_string(field: int, value: bytes) -> bytes:
    out = bytes([field << 3 | 2])
    n = len(value)
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n]) + value


def cri_version(address: str, timeout: float = 2.0, api: str = "v1") -> bytes:
    """Raw VersionResponse bytes from the CRI at `address`; raises grpc.RpcError."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(f"/runtime.{api}.RuntimeService/Version")
        return call(b"", timeout=timeout)


def cri_image_present(address: str, image: str, timeout: float = 2.0) -> bool:
    request = _pb_string(1, _pb_string(1, image.encode()))  # ImageStatusRequest{image: ImageSpec{image}}
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary("/runtime.v1.ImageService/ImageStatus")
        response = call(request, timeout=timeout)
    return response[:1] == b"\x0a"  # field 1 (image) is set only when found


# --- teardown -------------------------------------------------------------


def teardown(base_dir: Path, *, runc_bin: str = "runc", extra_cgroup_roots: Iterable[str] = ()) -> None:
    """Removes every trace of the instance under `base_dir`; idempotent."""
    lay = Layout(base_dir)
    _refuse_system_path(lay.base_dir)
    if not lay.base_dir.exists():
        return
    if not (lay.config.exists() and lay.config.read_text().startswith(_CONFIG_MARKER)):
        raise ContainerdError(f"{lay.base_dir} has no config written by tests.harness.containerd; not touching it")
    roots = _owned_cgroup_roots(lay, extra_cgroup_roots)
    _stop_daemon(lay, timeout=10.0)
    shim_sockets = _shim_sockets(lay)
    container_cgroups = _delete_runc_containers(lay, runc_bin)
    _kill_pids(_shim_pids(lay))
    for sock in shim_sockets:
        Path(sock).unlink(missing_ok=True)
    _unmount_all_under(lay.base_dir)
    _remove_cgroups(roots, container_cgroups)
    left = mounts_under(lay.base_dir)
    if left:
        raise ContainerdError(f"mounts remain under {lay.base_dir}, not removing it: {left}")
    shutil.rmtree(lay.base_dir)


def _owned_cgroup_roots(lay: Layout, extra: Iterable[str]) -> list[str]:
    roots = list(extra)
    if lay.cgroup_roots_file.exists():
        roots += [r.strip() for r in lay.cgroup_roots_file.read_text().splitlines() if r.strip()]
    for r in roots:
        _check_cgroup_root(r)
    return sorted(set(roots))


def _stop_daemon(lay: Layout, timeout: float) -> None:
    pid = _read_pid(lay)
    if pid is not None and _is_our_daemon(pid, lay):
        os.kill(pid, signal.SIGTERM)
        if not _wait_gone([pid], timeout):
            os.kill(pid, signal.SIGKILL)
            _wait_gone([pid], timeout)
    lay.pid_file.unlink(missing_ok=True)


def _read_pid(lay: Layout) -> int | None:
    try:
        return int(lay.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1]


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    # A zombie has exited; whoever reaps it is not our concern.
    return "\nState:\tZ" not in status


def _is_our_daemon(pid: int, lay: Layout) -> bool:
    # Guards against PID reuse: the process must be containerd on our config.
    return _alive(pid) and str(lay.config) in _cmdline(pid)


def _wait_gone(pids: Sequence[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _shim_pids(lay: Layout) -> list[int]:
    """Shims started by this instance: their `-address` argument is our socket."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        args = _cmdline(int(entry.name))
        if not args or not os.path.basename(args[0]).startswith("containerd-shim"):
            continue
        for flag, value in zip(args, args[1:], strict=False):
            if flag in ("-address", "--address") and value == str(lay.socket):
                found.append(int(entry.name))
                break
    return found


def _kill_pids(pids: Sequence[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if not _wait_gone(pids, 10.0):
        raise ContainerdError(f"processes did not die after SIGKILL: {[p for p in pids if _alive(p)]}")


def _shim_sockets(lay: Layout) -> list[str]:
    """Shim socket files named in this instance's task bundles."""
    sockets = []
    for address_file in lay.state.glob(f"{_TASK_STATE}/*/*/address"):
        try:
            address = address_file.read_text().strip()
        except OSError:
            continue
        path = address.removeprefix("unix://")
        if path.startswith(_SHIM_SOCKET_DIR):
            sockets.append(path)
    return sockets


def _delete_runc_containers(lay: Layout, runc_bin: str) -> list[str]:
    """Force-deletes (kills) every container in this instance's runc root and
    returns the cgroup directories they used."""
    cgroups: list[str] = []
    if not lay.runc_root.is_dir():
        return cgroups
    for ns_root in sorted(p for p in lay.runc_root.iterdir() if p.is_dir()):
        for container in sorted(p for p in ns_root.iterdir() if (p / "state.json").exists()):
            try:
                state = json.loads((container / "state.json").read_text())
                cgroups += list((state.get("cgroup_paths") or {}).values())
            except (OSError, ValueError):
                pass
            subprocess.run(
                [runc_bin, "--root", str(ns_root), "delete", "--force", container.name],
                capture_output=True,
                timeout=30,
            )
    return cgroups


# --- mounts ---------------------------------------------------------------


def _unescape_mount_path(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mountinfo() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount, in mount order."""
    result = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        result.append((_unescape_mount_path(fields[4]), fields[sep + 1]))
    return result


def mounts_under(base_dir: Path) -> list[str]:
    base = str(Path(base_dir).absolute())
    return [m for m, _ in _mountinfo() if m == base or m.startswith(base + "/")]


_MNT_DETACH = 2


def _umount(path: str, flags: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(path.encode(), flags) == 0:
        return 0
    return ctypes.get_errno()


def _unmount_all_under(base_dir: Path) -> None:
    # Innermost (latest) first; repeated because one mount point may be
    # stacked several times.
    for _ in range(10):
        mounts = mounts_under(base_dir)
        if not mounts:
            return
        for m in reversed(mounts):
            err = _umount(m)
            if err == errno.EBUSY:
                _umount(m, _MNT_DETACH)


def overlay_supported(scratch_parent: Path) -> bool:
    """Whether an overlay mount works on the filesystem holding `scratch_parent`."""
    probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=scratch_parent))
    try:
        for d in ("lower", "upper", "work", "merged"):
            (probe / d).mkdir()
        res = subprocess.run(
            [
                "mount", "-t", "overlay", "overlay", "-o",
                f"lowerdir={probe}/lower,upperdir={probe}/upper,workdir={probe}/work",
                str(probe / "merged"),
            ],
            capture_output=True,
        )
        if res.returncode != 0:
            return False
        _umount(str(probe / "merged"))
        return True
    finally:
        _unmount_all_under(probe)
        shutil.rmtree(probe, ignore_errors=True)


# --- cgroups --------------------------------------------------------------


def _check_cgroup_root(root: str) -> None:
    parts = [p for p in root.split("/") if p]
    if not root.startswith("/") or not parts or ".." in parts:
        raise ValueError(f"owned cgroup root must be an absolute cgroup path below '/', got {root!r}")


def _remove_cgroups(owned_roots: Sequence[str], container_cgroups: Sequence[str]) -> None:
    for root in owned_roots:
        for top in cgroupfs.cgroup_dirs(root):
            cgroupfs.kill_cgroup_tree(top)
    # runc delete already removed most container cgroups; these are what it
    # could not (e.g. a container whose state was half written).
    leftovers = [Path(c) for c in container_cgroups if Path(c).is_dir()]
    for root in owned_roots:
        leftovers += cgroupfs.cgroup_dirs(root)
    failed = []
    for top in leftovers:
        failed += cgroupfs.remove_cgroup_tree(top)
    if failed:
        raise ContainerdError(f"could not remove cgroups: {failed}")


# --- misc -----------------------------------------------------------------


def _refuse_system_path(base_dir: Path) -> None:
    resolved = os.path.realpath(base_dir)
    if resolved in _SYSTEM_PATHS:
        raise ValueError(f"refusing to use {base_dir} as a throwaway containerd directory")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


RELEASE_FILE = "release.json"  # which containerd `up --nri` started, for `restart`


def _release(base_dir: Path, nri: bool | None) -> dict[str, object]:
    """The Containerd arguments of the release under base_dir: with `nri` (up --nri) the cached
    newer one; None (restart): the one `up` wrote down (RELEASE_FILE), else the system's."""
    path = base_dir / RELEASE_FILE
    if nri is None:
        try:
            nri = bool(json.loads(path.read_text()).get("nri"))
        except (OSError, ValueError):
            nri = False
    if not nri:
        return {}
    version = runtimes.CONTAINERD_2
    why = runtimes.missing_reason(version)
    if why:
        raise ContainerdError(f"--nri: {why}")
    return {"bin_dir": runtimes.containerd_bin_dir(version), "major": runtimes.major(version), "nri": True,
            "version": version}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a throwaway containerd under one directory.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start containerd under DIR and import the test images")
    up.add_argument("dir", type=Path)
    up.add_argument("--cgroup-root", action="append", default=[], help="cgroup path this instance owns (repeatable)")
    up.add_argument("--snapshotter", default=None, help="default: overlayfs if it mounts here, else native")
    up.add_argument("--timeout", type=float, default=30.0)
    up.add_argument("--nri", "-nri", action="store_true",
                    help=f"containerd {runtimes.CONTAINERD_2} from {runtimes.CACHE} (make deps) with NRI on, its "
                    "socket DIR/nri.sock (printed on a second line)")
    down = sub.add_parser("down", help="stop containerd under DIR and remove every trace of it")
    down.add_argument("dir", type=Path)
    restart = sub.add_parser("restart", help="restart only the daemon, keeping state and running containers")
    restart.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    base_dir = args.dir.absolute()
    try:
        if args.command == "up":
            c = Containerd(base_dir, owned_cgroup_roots=args.cgroup_root, snapshotter=args.snapshotter,
                           **_release(base_dir, args.nri))
            c.start(args.timeout)
            print(c.socket)
            if args.nri:
                (base_dir / RELEASE_FILE).write_text(json.dumps({"nri": True, "version": c.version}) + "\n")
                print(c.layout.nri_socket)
        elif args.command == "down":
            teardown(base_dir)
        else:
            lay = Layout(base_dir)
            roots = _owned_cgroup_roots(lay, ())
            c = Containerd(base_dir, owned_cgroup_roots=roots, **_release(base_dir, None))
            c.stop_daemon()
            c.start()
            print(c.socket)
    except (ContainerdError, ValueError, FileNotFoundError) as e:
        print(f"containerd {args.command}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
