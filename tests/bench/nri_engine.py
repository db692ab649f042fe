"""Part of `make bench` section nri: the engine alone, in-process, against the CRI
double of the engine tests (tests/engine/fake_cri.py) over gRPC, as the relay
drives it. With N shared containers present, a Guaranteed CreateContainer with
the static policy shrinks the shared pool, so the engine updates every shared
container: CPU time (process_time, the double's share included) of the create
itself (its decision and the per-container update bookkeeping), of sending the
updates (the enforcer's UpdateContainerResources calls), and of the state save
that follows, each the median over several such creates. Also the CPU time of a
shared create at N containers (nothing else changes) and its save.

    python -m tests.bench.nri_engine [--containers 1000] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.config import parse_document
from cri_resmgr.engine import cri
from cri_resmgr.engine import saves as saves_module
from cri_resmgr.engine.cache import Cache
from cri_resmgr.engine.controller import build_policy
from cri_resmgr.engine.enforce import Enforcer
from cri_resmgr.engine.resmgr import ResourceManager
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.relay.runtime import CriRuntime
from cri_resmgr.topology import discover
from cri_resmgr.transport.contract import Request
from cri_resmgr.transport.upstream import Upstream
from tests.engine.fake_cri import FakeCRI
from tests.harness import sysfs

V1 = "/runtime.v1.RuntimeService/"
CONFIG = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 2\n"
T = TypeVar("T")


async def _cpu(work: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    t0 = time.process_time()
    out = await work()
    return out, (time.process_time() - t0) * 1e3


class _Bench:
    def __init__(self, work: Path, up: Upstream, resmgr: ResourceManager, enforcer: Enforcer):
        self.work, self.up, self.resmgr, self.enforcer = work, up, resmgr, enforcer
        self.create = cri.interceptors(resmgr)["CreateContainer"]
        self.n = 0

    async def container(self, qos: str) -> None:
        self.n += 1
        parent = {"guaranteed": "/kubepods", "burstable": "/kubepods/burstable",
                  "besteffort": "/kubepods/besteffort"}[qos] + f"/pod{self.n}"
        sandbox = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name=f"pod{self.n}", uid=f"u{self.n}",
                                                                     namespace="default"),
                                      linux=pb.LinuxPodSandboxConfig(cgroup_parent=parent))
        pod = await self.up.call(V1 + "RunPodSandbox", pb.RunPodSandboxRequest(config=sandbox),
                                 pb.RunPodSandboxResponse)
        res = pb.LinuxContainerResources()
        if qos == "guaranteed":
            res.cpu_shares, res.cpu_quota, res.cpu_period, res.memory_limit_in_bytes = 1024, 100000, 100000, 1 << 28
        elif qos == "burstable":
            res.cpu_shares = 102
        cfg = pb.ContainerConfig(metadata=pb.ContainerMetadata(name=f"c{self.n}"),
                                 linux=pb.LinuxContainerConfig(resources=res))
        req = pb.CreateContainerRequest(pod_sandbox_id=pod.pod_sandbox_id, config=cfg, sandbox_config=sandbox)

        async def forward(m: Any) -> Any:
            return await self.up.call(V1 + "CreateContainer", m, pb.CreateContainerResponse)

        await self.create(Request(name="CreateContainer", path=V1 + "CreateContainer", message=req, forward=forward))

    async def save(self) -> None:
        """The state save the create scheduled (deferred past the run, see `run`), done
        now: snapshot, JSON, write and fsync."""
        self.resmgr.save_now()


async def _setup(work: Path) -> tuple[FakeCRI, _Bench]:
    sysfs.generate(work / "host", sockets=2, cores_per_die=16, threads_per_core=2)
    fake = FakeCRI(str(work / "fake.sock"))
    await fake.start()
    up = Upstream(fake.socket_path)
    registry = default_registry()
    config = parse_document(CONFIG, "bench", registry.names())
    topology = discover(work / "host")
    policy = build_policy(registry.lookup("static"), config, lambda: topology)
    assert policy is not None
    enforcer = Enforcer(CriRuntime(up))
    resmgr = ResourceManager("static", policy, Cache(work / "state"), enforcer, asyncio.Lock())
    return fake, _Bench(work, up, resmgr, enforcer)


async def _scenario(b: _Bench, containers: int, rounds: int, profile: cProfile.Profile | None) -> dict[str, Any]:
    for i in range(containers):
        await b.container("burstable" if i % 2 else "besteffort")
    await b.enforcer.flush()
    await b.save()
    cpu: dict[str, list[float]] = {k: [] for k in ("create", "updates", "save", "shared_create", "shared_save")}
    for _ in range(rounds):
        if profile is not None:
            profile.enable()
        cpu["create"].append((await _cpu(lambda: b.container("guaranteed")))[1])
        cpu["save"].append((await _cpu(b.save))[1])
        if profile is not None:
            profile.disable()
        cpu["updates"].append((await _cpu(b.enforcer.flush))[1])
        cpu["shared_create"].append((await _cpu(lambda: b.container("burstable")))[1])
        cpu["shared_save"].append((await _cpu(b.save))[1])
    return {k: statistics.median(v) for k, v in cpu.items()}


def run(containers: int = 1000, rounds: int = 5, profile: cProfile.Profile | None = None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="crirm-bench-nri-engine-", dir="/tmp"))

    async def main() -> dict[str, Any]:
        fake, b = await _setup(work)
        try:
            return await _scenario(b, containers, rounds, profile)
        finally:
            await b.enforcer.close()
            await b.up.channel.close()
            await fake.stop()

    delay, saves_module.SAVE_DELAY = saves_module.SAVE_DELAY, 3600.0  # saves only when the bench says
    try:
        result = asyncio.run(main())
    finally:
        saves_module.SAVE_DELAY = delay
        shutil.rmtree(work, ignore_errors=True)
    result["containers"] = containers
    return result


def format_result(r: dict[str, Any]) -> str:
    return (f"engine in-process, {r['containers']} shared containers, CPU ms (median): Guaranteed create "
            f"{r['create']:.1f}, its updates sent {r['updates']:.1f}, its save {r['save']:.1f}; "
            f"shared create {r['shared_create']:.1f}, its save {r['shared_save']:.1f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--containers", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="cProfile the Guaranteed creates and their saves; top 25")
    p.add_argument("--sort", default="tottime", help="the profile's order (pstats key)")
    args = p.parse_args(argv)
    prof = cProfile.Profile() if args.profile else None
    print(format_result(run(args.containers, args.rounds, prof)))
    if prof is not None:
        pstats.Stats(prof).sort_stats(args.sort).print_stats(25)


if __name__ == "__main__":
    main()
