"""The relay's cost: the same CRI calls direct to containerd and through the
real `cri-resmgr` process, in one run.

* latency: p50/p99 of Version, ImageStatus, ListImages, ContainerStatus and
  ListContainers (of `containers` created containers), one caller, direct and
  relay blocks alternating so that machine noise hits both alike;
* throughput: calls/s with 1, 8 and 32 concurrent callers (threads on one
  channel, as kubelet has one connection), each cell a fixed time split in
  alternating halves, bounded in calls;
* the same latency and the throughput at 32 callers through a relay with the
  static policy active (ListContainers and ContainerStatus replies read for
  crash detection), against the passthrough relay;
* the floor: a bare byte pipe between the sockets (`tests.bench.pipe`, its own
  process on the same event loop, no parsing) in the same latency rounds and
  throughput cells, so that every run gives relay/direct, pipe/direct and
  relay/pipe side by side;
* the relay's CPU time per call (the scheduler's nanoseconds of each of its
  threads, /proc/PID/task/*/schedstat, around its blocks) and its memory
  (VmRSS, VmHWM) after the run;
* CreateContainer of best-effort containers (created, not started): direct,
  through a passthrough relay (`-policy null`) and through an intercepting
  one (static policy, 1 CPU reserved), interleaved.

The client sends pre-serialized requests over raw-bytes multicallables and
does not decode replies, so its own protobuf cost does not mask the relay's.

    python -m tests.bench.relay [--seconds 2] [--containers 100]
"""

from __future__ import annotations

import argparse
import gc
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cri_resmgr._proto import runtime_v1_pb2 as pb
from tests.bench.pipe import PipeProcess
from tests.bench.relay_report import format_result, format_table
from tests.harness.containerd import Containerd
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

__all__ = ["TARGETS", "run", "format_result", "format_table", "main"]

RUNTIME = "/runtime.v1.RuntimeService/"
IMAGE = "/runtime.v1.ImageService/"
METHODS = ("Version", "ImageStatus", "ListImages", "ContainerStatus", "ListContainers")
PATHS = {m: (IMAGE if m in ("ImageStatus", "ListImages") else RUNTIME) + m for m in METHODS}
OBSERVED = ("ContainerStatus", "ListContainers")  # read by crash detection with a policy active
CALLERS = (1, 8, 32)
STATIC_CONFIG = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", 16 << 20),)
RPC_TIMEOUT = 30.0
_NEEDED_BINARIES = ("containerd", "containerd-shim-runc-v2", "runc", "ctr")

# name -> (what is measured, limit, "max" if the value must not exceed the limit else "min")
TARGETS: dict[str, tuple[str, float, str]] = {
    "Version added p50 (us)": ("latency.Version.added_p50_us", 500.0, "max"),
    "ListContainers added p50 (us)": ("latency.ListContainers.added_p50_us", 650.0, "max"),
    # Issue 17: the relay's fixed cost per call.
    **{f"{m} p50, relay/direct": (f"latency.{m}.ratio_p50", 1.3, "max") for m in METHODS},
    **{f"{m} throughput at 32 callers, relay/direct": (f"throughput.{m}.32.ratio", 0.9, "min") for m in METHODS},
    **{f"{m} p50, static/passthrough": (f"latency.{m}.static_ratio_p50", 1.1, "max") for m in OBSERVED},
    **{f"{m} throughput at 32 callers, static/passthrough": (f"throughput.{m}.32.static_ratio", round(1 / 1.1, 2),
                                                             "min") for m in OBSERVED},
    "relay peak RSS, VmHWM (MiB)": ("memory.passthrough.VmHWM_mib", 64.0, "max"),
    # Per-call metrics (timing, status codes) must cost next to nothing (issue 15).
    "Version p50, metrics on - off (us)": ("latency.Version.metrics_added_p50_us", 50.0, "max"),
}


# --- /proc readings ----------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (in clock ticks of 10 ms)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_seconds(pid: int) -> float:
    """CPU time of a process, in seconds: the scheduler's nanosecond count of each of
    its threads (/proc/PID/task/TID/schedstat); where that cannot be read,
    `proc_cpu_seconds` (clock ticks: too coarse for a block of short calls)."""
    try:
        total = 0
        for task in os.scandir(f"/proc/{pid}/task"):
            with open(f"{task.path}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return proc_cpu_seconds(pid)


def proc_memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[f"{key}_mib"] = round(int(value.split()[0]) / 1024, 1)
    return out


# --- statistics ----------------------------------------------------------------

def _pct(ordered: Sequence[int], p: float) -> int:
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def latency_stats(samples_ns: Sequence[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {"n": len(ordered), "p50_us": round(_pct(ordered, 0.50) / 1e3, 1),
            "p99_us": round(_pct(ordered, 0.99) / 1e3, 1), "max_us": round(ordered[-1] / 1e3, 1)}


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("nan")


# --- the measured callers ------------------------------------------------------

@dataclass
class Target:
    """One CRI endpoint as the benchmark calls it: raw bytes in, raw bytes out."""

    name: str
    channel: grpc.Channel
    pid: int  # whose CPU time a block is charged to

    def call(self, method: str) -> Callable[..., bytes]:
        return self.channel.unary_unary(PATHS.get(method, RUNTIME + method))


class CpuMeter:
    """Accumulates a process's CPU seconds over the blocks it is running for."""

    def __init__(self, pid: int):
        self.pid = pid
        self.seconds = 0.0
        self.calls = 0
        self._start = 0.0

    def __enter__(self) -> CpuMeter:
        self._start = cpu_seconds(self.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += cpu_seconds(self.pid) - self._start

    def us_per_call(self) -> float:
        return round(self.seconds / self.calls * 1e6, 1) if self.calls else float("nan")


def _timed_block(call: Callable[..., bytes], request: bytes, count: int, out: list[int]) -> None:
    clock = time.perf_counter_ns
    for _ in range(count):
        t0 = clock()
        call(request, timeout=RPC_TIMEOUT)
        out.append(clock() - t0)


def measure_latency(targets: Sequence[Target], method: str, request: bytes, *, rounds: int,
                    block: int, warmup: int) -> dict[str, Any]:
    """One caller; `rounds` alternating blocks of `block` calls per target
    (their order flips each round), after `warmup` unmeasured calls each."""
    calls = {t.name: t.call(method) for t in targets}
    for t in targets:
        for _ in range(warmup):
            calls[t.name](request, timeout=RPC_TIMEOUT)
    samples: dict[str, list[int]] = {t.name: [] for t in targets}
    meters = {t.name: CpuMeter(t.pid) for t in targets}
    gc.disable()
    try:
        for r in range(rounds):
            for t in (targets if r % 2 == 0 else list(reversed(targets))):
                with meters[t.name]:
                    _timed_block(calls[t.name], request, block, samples[t.name])
                meters[t.name].calls += block
    finally:
        gc.enable()
    out: dict[str, Any] = {}
    for t in targets:
        out[t.name] = {**latency_stats(samples[t.name]), "cpu_us_per_call": meters[t.name].us_per_call()}
    return out


def _drive(call: Callable[..., bytes], request: bytes, callers: int, seconds: float,
           max_calls: int) -> tuple[int, float]:
    """`callers` threads calling back to back for `seconds` (or until
    `max_calls` in all); returns (calls, elapsed seconds)."""
    counts = [0] * callers
    errors: list[BaseException] = []
    per_thread = max(1, max_calls // callers)
    gate = threading.Barrier(callers + 1)
    deadline = [0.0]

    def caller(i: int) -> None:
        gate.wait()
        end, n = deadline[0], 0
        try:
            while n < per_thread and time.perf_counter() < end:
                call(request, timeout=RPC_TIMEOUT)
                n += 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        counts[i] = n

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(callers)]
    for th in threads:
        th.start()
    deadline[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    gate.wait()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{callers} callers: {errors[0]!r}") from errors[0]
    return sum(counts), elapsed


def measure_throughput(targets: Sequence[Target], method: str, request: bytes, callers: int, *,
                       seconds: float, halves: int = 2, max_calls: int = 200_000) -> dict[str, Any]:
    """Calls/s per target over `seconds`, split into `halves` alternating parts."""
    calls = {t.name: t.call(method) for t in targets}
    done = {t.name: 0 for t in targets}
    elapsed = {t.name: 0.0 for t in targets}
    meters = {t.name: CpuMeter(t.pid) for t in targets}
    for h in range(halves):
        for t in (targets if h % 2 == 0 else list(reversed(targets))):
            with meters[t.name]:
                n, s = _drive(calls[t.name], request, callers, seconds / halves, max_calls // halves)
            done[t.name] += n
            elapsed[t.name] += s
            meters[t.name].calls += n
    return {t.name: {"calls": done[t.name], "calls_per_s": round(done[t.name] / elapsed[t.name], 1),
                     "cpu_us_per_call": meters[t.name].us_per_call()} for t in targets}


# --- CreateContainer -----------------------------------------------------------

def _create_requests(kubelet: Kubelet, pod: PodSpec, sandbox_id: str, names: Sequence[str]) -> list[bytes]:
    """What kubelet sends for best-effort containers, serialized up front."""
    sandbox = kubelet.pod_sandbox_config(pod)
    out = []
    for name in names:
        spec = ContainerSpec(name=name)
        (kubelet.pod_log_directory(pod) / name).mkdir(parents=True, exist_ok=True)
        config = kubelet.container_config(pod, spec)
        out.append(pb.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config,
                                             sandbox_config=sandbox).SerializeToString())
    return out


def measure_creates(kubelets: dict[str, Kubelet], pids: dict[str, int], creates: int,
                    block: int, settle: float = 0.5) -> dict[str, Any]:
    """`creates` CreateContainer calls per target, each target in its own pod
    (run through that target, as kubelet would), in alternating blocks.

    cpu_us_per_call: the process's CPU during its own blocks. A relay's deferred work
    (the state save 100 ms after a decision, in its own thread) lands in whichever
    block runs then, its own or another's, so for a relay also cpu_us_per_call_all:
    its CPU from the first block to `settle` s after the last, over its creates."""
    requests: dict[str, list[bytes]] = {}
    calls = {}
    for name, k in kubelets.items():
        pod = PodSpec(name=f"bench-create-{name}", containers=[ContainerSpec(name="x0")])
        sandbox_id = k.run_pod(pod)
        requests[name] = _create_requests(k, pod, sandbox_id, [f"x{i}" for i in range(creates)])
        calls[name] = k.channel.unary_unary(RUNTIME + "CreateContainer")
    samples: dict[str, list[int]] = {n: [] for n in kubelets}
    meters = {n: CpuMeter(pids[n]) for n in kubelets}
    order = list(kubelets)
    clock = time.perf_counter_ns
    whole = {n: cpu_seconds(pids[n]) for n in kubelets}
    for r, start in enumerate(range(0, creates, block)):
        for name in (order if r % 2 == 0 else list(reversed(order))):
            with meters[name]:
                for req in requests[name][start:start + block]:
                    t0 = clock()
                    calls[name](req, timeout=RPC_TIMEOUT)
                    samples[name].append(clock() - t0)
                    meters[name].calls += 1
    time.sleep(settle)
    whole = {n: round((cpu_seconds(pids[n]) - whole[n]) / creates * 1e6, 1) for n in kubelets}
    return {n: {**latency_stats(samples[n]), "cpu_us_per_call": meters[n].us_per_call(),
                "cpu_us_per_call_all": whole[n]} for n in kubelets}


# --- the run -------------------------------------------------------------------

def _check_environment() -> None:
    if os.geteuid() != 0:
        raise RuntimeError("the relay benchmark needs root (it runs its own containerd)")
    missing = [b for b in _NEEDED_BINARIES if shutil.which(b) is None]
    if missing:
        raise RuntimeError(f"missing binaries: {', '.join(missing)} (run scripts/install-deps.sh)")


def _short_dir(prefix: str, stack: ExitStack) -> Path:
    # Under /tmp and short: unix socket paths must fit in 108 bytes.
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    stack.callback(shutil.rmtree, d, True)
    return d


def _start_relay(stack: ExitStack, workdir: Path, runtime_socket: str, args: Sequence[str],
                 name: str) -> RelayProcess:
    relay = RelayProcess(workdir, runtime_socket, args, name=name)
    stack.callback(relay.stop)
    return relay.start()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape_while(port: int, stack: ExitStack, period: float = 1.0) -> None:
    """Scrapes /metrics every `period` s (Prometheus' default is 60 s: this is the harsher
    case) until the stack closes, so the metered relay pays for its scrapes too."""
    stop = threading.Event()

    def scrape() -> None:
        while not stop.wait(period):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            except OSError:
                pass  # shutting down

    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    stack.callback(t.join, 10)
    stack.callback(stop.set)


def _channel(address: str, stack: ExitStack) -> grpc.Channel:
    ch = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    stack.callback(ch.close)
    return ch


def _progress(log: Callable[[str], None] | None, text: str) -> None:
    if log is not None:
        log(text)


def run(seconds: float = 2.0, containers: int = 100, creates: int = 50, rounds: int = 10,
        block: int = 100, warmup: int = 200, callers: Sequence[int] = CALLERS,
        log: Callable[[str], None] | None = None, transport: str = "h2") -> dict[str, Any]:
    """Runs every relay measurement against a throwaway containerd; returns
    the figures and a verdict per entry of TARGETS. Everything started is
    stopped and removed again, also on errors and Ctrl-C."""
    _check_environment()
    result: dict[str, Any] = {"cpus": os.cpu_count(), "containers": containers, "transport": transport,
                              "seconds_per_cell": seconds, "callers": list(callers),
                              "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    cgroup_root = f"/crirm-bench-{secrets.token_hex(4)}"
    with ExitStack() as stack:
        ctd_dir = Path(tempfile.mkdtemp(prefix="crirm-bn-", dir="/tmp"))
        containerd = Containerd(ctd_dir, owned_cgroup_roots=[cgroup_root])
        stack.callback(containerd.stop)  # removes ctd_dir, the containers and the cgroups
        t0 = time.monotonic()
        containerd.start()
        workdir = _short_dir("crirm-br-", stack)
        relay = _start_relay(stack, workdir, str(containerd.socket),
                             ["-policy", "null", "-relay-transport", transport], "null")
        # The same relay with metrics served: calls timed, /metrics scraped during the run.
        port = _free_port()
        metered = _start_relay(stack, workdir, str(containerd.socket),
                               ["-policy", "null", "-relay-transport", transport,
                                "-metrics-address", f"127.0.0.1:{port}"], "metered")
        _scrape_while(port, stack)
        pipe = PipeProcess(workdir / "pipe.sock", str(containerd.socket))
        stack.callback(pipe.stop)
        pipe.start()
        kube_root = f"{cgroup_root}/kubepods"
        direct_k = Kubelet(containerd.address, cgroup_root=kube_root)
        stack.callback(direct_k.close)
        pod = PodSpec(name="bench-list", containers=[ContainerSpec(name=f"c{i}") for i in range(containers)])
        sandbox_id = direct_k.run_pod(pod)
        ids = [direct_k.create_container(pod, sandbox_id, c) for c in pod.containers]
        _progress(log, f"containerd up, {containers} containers created in {time.monotonic() - t0:.1f}s")

        # The static policy's relay starts once the containers exist: it adopts them at start-up.
        config = workdir / "static.yaml"
        config.write_text(STATIC_CONFIG)
        static = _start_relay(stack, workdir, str(containerd.socket),
                              ["-force-config", str(config), "-relay-transport", transport], "static")

        ctd_pid = containerd.pid
        assert ctd_pid is not None and relay.proc is not None and metered.proc is not None
        assert static.proc is not None and pipe.proc is not None
        targets = [Target("direct", _channel(containerd.address, stack), ctd_pid),
                   Target("relay", _channel(relay.address, stack), relay.proc.pid),
                   Target("pipe", _channel(pipe.address, stack), pipe.proc.pid)]
        metered_target = Target("metrics", _channel(metered.address, stack), metered.proc.pid)
        static_target = Target("static", _channel(static.address, stack), static.proc.pid)
        requests = {
            "Version": pb.VersionRequest(version="0.1.0").SerializeToString(),
            "ImageStatus": pb.ImageStatusRequest(image=pb.ImageSpec(image=containerd.busybox_image)).SerializeToString(),
            "ListImages": pb.ListImagesRequest().SerializeToString(),
            "ListContainers": pb.ListContainersRequest().SerializeToString(),
            "ContainerStatus": pb.ContainerStatusRequest(container_id=ids[len(ids) // 2]).SerializeToString(),
        }
        for t in [*targets, static_target]:  # all must answer the same thing
            listed = pb.ListContainersResponse.FromString(t.call("ListContainers")(requests["ListContainers"]))
            if len(listed.containers) != containers:
                raise RuntimeError(f"{t.name} lists {len(listed.containers)} containers, expected {containers}")

        latency: dict[str, Any] = {}
        for method in METHODS:
            m = measure_latency([*targets, metered_target, static_target], method, requests[method], rounds=rounds,
                                block=block, warmup=warmup)
            m["added_p50_us"] = round(m["relay"]["p50_us"] - m["direct"]["p50_us"], 1)
            m["metrics_added_p50_us"] = round(m["metrics"]["p50_us"] - m["relay"]["p50_us"], 1)
            m["metrics_added_p99_us"] = round(m["metrics"]["p99_us"] - m["relay"]["p99_us"], 1)
            m["added_p99_us"] = round(m["relay"]["p99_us"] - m["direct"]["p99_us"], 1)
            m["ratio_p50"] = _ratio(m["relay"]["p50_us"], m["direct"]["p50_us"])
            m["ratio_p99"] = _ratio(m["relay"]["p99_us"], m["direct"]["p99_us"])
            m["static_ratio_p50"] = _ratio(m["static"]["p50_us"], m["relay"]["p50_us"])
            m["pipe_ratio_p50"] = _ratio(m["pipe"]["p50_us"], m["direct"]["p50_us"])
            m["relay_pipe_ratio_p50"] = _ratio(m["relay"]["p50_us"], m["pipe"]["p50_us"])
            latency[method] = m
            _progress(log, f"latency {method}: direct p50 {m['direct']['p50_us']} us, "
                           f"relay p50 {m['relay']['p50_us']} us, pipe p50 {m['pipe']['p50_us']} us, with metrics {m['metrics']['p50_us']} us, "
                           f"static {m['static']['p50_us']} us")
        result["latency"] = latency

        throughput: dict[str, Any] = {}
        for method in METHODS:
            throughput[method] = {}
            for n in callers:
                with_static = [*targets, static_target] if n == max(callers) else targets
                m = measure_throughput(with_static, method, requests[method], n, seconds=seconds)
                m["ratio"] = _ratio(m["relay"]["calls_per_s"], m["direct"]["calls_per_s"])
                m["pipe_ratio"] = _ratio(m["pipe"]["calls_per_s"], m["direct"]["calls_per_s"])
                m["relay_pipe_ratio"] = _ratio(m["relay"]["calls_per_s"], m["pipe"]["calls_per_s"])
                if "static" in m:
                    m["static_ratio"] = _ratio(m["static"]["calls_per_s"], m["relay"]["calls_per_s"])
                throughput[method][str(n)] = m
                _progress(log, f"throughput {method} x{n}: direct {m['direct']['calls_per_s']}/s, "
                               f"relay {m['relay']['calls_per_s']}/s, pipe {m['pipe']['calls_per_s']}/s")
        result["throughput"] = throughput
        result["memory"] = {"passthrough": proc_memory_mib(relay.proc.pid)}

        kubelets = {"direct": direct_k}
        for name, r in (("passthrough", relay), ("intercepted", static)):
            k = Kubelet(r.address, cgroup_root=kube_root)
            stack.callback(k.close)
            kubelets[name] = k
        pids = {"direct": ctd_pid, "passthrough": relay.proc.pid, "intercepted": static.proc.pid}
        create = measure_creates(kubelets, pids, creates, block=5)
        create["added_p50_us"] = round(create["intercepted"]["p50_us"] - create["passthrough"]["p50_us"], 1)
        create["added_p99_us"] = round(create["intercepted"]["p99_us"] - create["passthrough"]["p99_us"], 1)
        result["create"] = create
        _progress(log, f"CreateContainer p50: direct {create['direct']['p50_us']} us, passthrough "
                       f"{create['passthrough']['p50_us']} us, intercepted {create['intercepted']['p50_us']} us")
        result["memory"]["passthrough"] = proc_memory_mib(relay.proc.pid)
        result["memory"]["intercepting"] = proc_memory_mib(static.proc.pid)
        _progress(log, "tearing down containerd")
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    result["targets"] = verdicts(result)
    return result


def _lookup(result: dict[str, Any], dotted: str) -> Any:
    value: Any = result
    for part in dotted.split("."):
        value = value[part]
    return value


def verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each entry of TARGETS with its measured value and PASS or MISS."""
    out = []
    for name, (path, limit, kind) in TARGETS.items():
        try:
            value = _lookup(result, path)
        except KeyError:
            out.append({"target": name, "value": None, "limit": limit, "kind": kind, "verdict": "n/a"})
            continue
        ok = value <= limit if kind == "max" else value >= limit
        out.append({"target": name, "value": value, "limit": limit, "kind": kind,
                    "verdict": "PASS" if ok else "MISS"})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per target and throughput cell")
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--creates", type=int, default=50)
    parser.add_argument("--transport", choices=("h2", "grpc"), default="h2", help="the relay's -relay-transport")
    args = parser.parse_args(argv)
    result = run(seconds=args.seconds, containers=args.containers, creates=args.creates,
                 log=lambda text: print(f"  .. {text}", flush=True), transport=args.transport)
    print(format_result(result))
    return 0 if all(t["verdict"] == "PASS" for t in result["targets"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
