"""`make demo`: a throwaway containerd, the relay in front of it, pods through it.

Part 1 runs the relay as a CRI message dumper (`-policy null -dump
'reset,full:.*'`) and shows the dump of a kubelet-like pod lifecycle. Part 2
runs it with the static policy and shows real cgroup cpusets changing. Everything
it starts is stopped, by PID, and everything it creates is removed.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from cri_resmgr.topology import discover
from tests.harness import cgroupfs
from tests.harness.containerd import Containerd
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def dumper_part(ctd: Containerd, work: Path, cgroup_root: str) -> None:
    dump = work / "cri.dump"
    say("relay as a CRI message dumper: cri-resmgr -policy null -dump 'reset,full:.*' -dump-file " + str(dump))
    relay = RelayProcess(work / "dumper", str(ctd.socket),
                         ["-policy", "null", "-dump", "reset,full:.*", "-dump-file", str(dump)]).start()
    try:
        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            say("a kubelet-like pod lifecycle through the relay socket " + relay.socket)
            pod = PodSpec(name="demo", namespace="default", containers=[
                ContainerSpec(name="app", requests={"cpu": "250m", "memory": "32Mi"},
                              limits={"cpu": "500m", "memory": "64Mi"},
                              env={"GREETING": "hello", "DB_PASSWORD": "not-in-the-dump"})])
            h = k.start_pod(pod)
            cid = h.container_ids["app"]
            cg = k.cgroup_files(cid)
            print(f"container {cid[:12]} running; its real cgroup: cpu.shares={cg.cpu_shares()} "
                  f"cfs_quota_us={cg.cfs_quota_us()} memory.limit_in_bytes={cg.memory_limit_in_bytes()}")
            k.delete_pod(h)
            print("pod stopped and removed")
    finally:
        relay.stop()
    say(f"the dump ({dump}); secrets are masked")
    text = dump.read_text()
    lines = text.splitlines()
    shown = lines[:60]
    print("\n".join(shown))
    if len(lines) > len(shown):
        print(f"... ({len(lines) - len(shown)} more lines)")


def policy_part(ctd: Containerd, work: Path, cgroup_root: str) -> None:
    online = discover("/").online
    config = work / "static.yaml"
    config.write_text("policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n")
    say(f"relay with the static policy (1 CPU reserved) on this {len(online)}-CPU machine: "
        f"cri-resmgr -force-config {config}")
    relay = RelayProcess(work / "static", str(ctd.socket), ["-force-config", str(config)]).start()
    try:
        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            shared = k.start_pod(PodSpec(name="besteffort", containers=[ContainerSpec(name="c")]))
            show(k, "besteffort", shared.container_ids["c"])
            res = {"cpu": "1", "memory": "32Mi"}
            excl = k.start_pod(PodSpec(name="guaranteed", containers=[
                ContainerSpec(name="c", requests=res, limits=res)]))
            time.sleep(0.5)  # the shared container's update is sent right after the create
            print("after a Guaranteed 1-CPU container arrives:")
            show(k, "guaranteed", excl.container_ids["c"])
            show(k, "besteffort", shared.container_ids["c"])
            k.delete_pod(excl)
            time.sleep(0.5)
            print("after it is removed:")
            show(k, "besteffort", shared.container_ids["c"])
            k.delete_pod(shared)
    finally:
        relay.stop()
    print("\n".join(line for line in relay.log().splitlines() if "updating " in line))


def show(k: Kubelet, name: str, cid: str) -> None:
    print(f"  {name:<11} cpuset.cpus={k.cgroup_files(cid).cpuset_cpus():<6} "
          f"Cpus_allowed_list={cgroupfs.cpus_allowed_list(k.container_pid(cid))}")


def main() -> int:
    # SIGTERM must run the cleanup below too, not kill us half-way.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="crirm-demo-", dir="/tmp"))
    cgroup_root = f"/crirm-demo-{secrets.token_hex(4)}"
    ctd = Containerd(work / "ctd", owned_cgroup_roots=[cgroup_root])
    try:
        say(f"starting a throwaway containerd under {work}/ctd (the system's containerd is not touched)")
        ctd.start()
        dumper_part(ctd, work, cgroup_root)
        if len(discover("/").online) >= 2:
            policy_part(ctd, work, cgroup_root)
        say("cleaning up")
    finally:
        ctd.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("done: containerd stopped, mounts and cgroups removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
