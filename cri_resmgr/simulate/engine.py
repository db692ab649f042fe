"""Runs a workload's calls through the relay's own decision path, with no runtime.

The policy is built as the controller builds it (`engine.controller.build_policy`:
the registry entry, the policy context from the configuration) and handed to the
engine's `ResourceManager` with the configuration's options; each call goes to the
interceptor the relay would hand it to, as a `contract.Request` whose `forward`
returns the recorded (or made-up) reply instead of asking a runtime. So the
classification of the CRI request into a Workload, the cache, the releases on stop,
exit and removal, and the updates to other containers are the relay's code.

No enforcer: what the relay would send to other containers is worked out the way
`ResourceManager._sync` does (a live container whose resources differ from what it
was last told), from the policy's own book.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import Message

from cri_resmgr.config import Config
from cri_resmgr.engine import cri
from cri_resmgr.engine.cache import Cache
from cri_resmgr.engine.controller import build_policy
from cri_resmgr.engine.resmgr import Options, ResourceManager
from cri_resmgr.policy.api import Resources
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import Registry
from cri_resmgr.policy.usage import PoolUsage
from cri_resmgr.simulate.calls import Call
from cri_resmgr.simulate.invariants import Checker
from cri_resmgr.simulate.recording import Event, RecordingPolicy
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.transport.contract import InterceptError, Request

__all__ = ["Step", "Outcome", "SimulationError", "simulate"]

log = logging.getLogger(__name__)


class SimulationError(ValueError):
    """The simulation cannot start: a policy that decides nothing, a rejected configuration."""


@dataclass
class Step:
    """One call that made the policy decide, or changed what other containers run on."""

    index: int  # position in the workload, from 1
    where: str
    method: str
    events: list[Event]
    updates: dict[str, Resources]  # container key -> what it would be told now
    messages: list[str] = field(default_factory=list)  # the engine's warnings and errors during the call
    failed: str = ""  # the runtime's recorded error for the call
    # After the call, each pool (balloon) its decisions and updates name: its CPUs, the
    # CPUs exclusive to containers in it, what its shared containers run on (kept steps only).
    pools: dict[str, PoolUsage] = field(default_factory=dict)
    placed_in: dict[str, str] = field(default_factory=dict)  # updated container key -> its pool then


@dataclass
class Outcome:
    policy_name: str
    policy: RecordingPolicy
    cache: Cache
    topology: Topology
    config: Config
    calls: int  # in the workload
    intercepted: int  # handed to the engine
    steps: list[Step]  # when kept (not brief)
    decision_ns: list[int]  # the policy's time per decision
    call_ns: list[int]  # the engine's time per intercepted call (classification, cache, policy)
    wall_s: float
    updates: int
    warnings: list[str]  # requests not met: the policy's warnings, with the call
    messages: list[str]  # the engine's log warnings and errors, with the call
    checker: Checker
    policy_errors: int
    # The deciding thread's CPU time for the same (preemption on a busy machine inflates
    # the wall clock figures above, not these).
    decision_cpu_ns: list[int] = field(default_factory=list)
    call_cpu_ns: list[int] = field(default_factory=list)
    available: CPUSet = field(default_factory=CPUSet)  # the CPUs the policy may use
    reserved: CPUSet = field(default_factory=CPUSet)  # of those, the reserved ones (from the start)


class _Capture(logging.Handler):
    """The engine's warnings and errors during a call (its denied-exclusive warning is
    the decision's own warning, reported from the decision)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.funcName != "_denied":
            self.lines.append(f"{record.levelname.lower()}: {record.getMessage()}")


def simulate(calls: Iterable[Call], topology: Topology, config: Config, policy_name: str, registry: Registry,
             keep_steps: bool = True, check_every: int = 0,
             progress: Callable[[int], None] | None = None) -> Outcome:
    """Raises SimulationError when there is nothing to simulate with."""
    info = registry.lookup(config.policy.active or policy_name)
    try:
        inner = build_policy(info, config, lambda: topology)
        context = build_context(topology, available=config.policy.available_cpu,
                                reserved=config.policy.reserved_cpu)
    except ValueError as e:  # ConfigError: the configuration does not fit this machine
        raise SimulationError(str(e)) from None
    if inner is None:
        raise SimulationError(f"policy {info.name} decides nothing: give -policy or a configuration whose "
                              "policy.Active names a policy (see -list-policies)")
    policy = RecordingPolicy(inner)
    cache = Cache(None)
    options = Options(fail_closed=config.policy.fail_closed, reserved_namespaces=config.policy.reserved_namespaces)
    # (balloons: a balloon's containers share its CPUs by design; the policy's
    # expects_isolation says which Guaranteed ones are dedicated and must not.)
    checker = Checker(topology, context.available, inner, cache, reserved=context.reserved)
    capture = _Capture()
    engine_log = logging.getLogger("cri_resmgr")
    old_level, old_propagate = engine_log.level, engine_log.propagate
    engine_log.addHandler(capture)
    engine_log.setLevel(logging.WARNING)  # the relay's per-decision INFO lines are what the report prints
    engine_log.propagate = False
    try:
        return asyncio.run(_run(calls, info.name, policy, cache, options, topology, config, checker, capture,
                                keep_steps, check_every, progress))
    finally:
        engine_log.removeHandler(capture)
        engine_log.setLevel(old_level)
        engine_log.propagate = old_propagate


async def _run(calls: Iterable[Call], name: str, policy: RecordingPolicy, cache: Cache, options: Options,
               topology: Topology, config: Config, checker: Checker, capture: _Capture, keep_steps: bool,
               check_every: int, progress: Callable[[int], None] | None) -> Outcome:
    resmgr = ResourceManager(name, policy, cache, None, asyncio.Lock(), options)
    table = cri.interceptors(resmgr)
    # The calls may come as they are made (a churn): counted as they go.
    out = Outcome(name, policy, cache, topology, config, 0, 0, [], [], [], 0.0, 0, [], [], checker, 0,
                  available=checker.available, reserved=checker.reserved)
    told: dict[str, Resources] = {}  # what each container was last given, as the relay tracks it
    t_start = time.perf_counter()
    for index, call in enumerate(calls, 1):
        out.calls = index
        interceptor = table.get(call.method)
        if interceptor is None:
            continue  # relayed unread
        out.intercepted += 1
        failed = ""
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        try:
            await interceptor(Request(call.method, call.path, call.request, _forward(call)))
        except grpc.aio.AioRpcError as e:  # the runtime's recorded failure, as kubelet saw it
            failed = f"{call.code}: {e.details() or ''}".rstrip(": ")
        except InterceptError as e:  # a fail-closed policy refused the call
            failed = f"refused by the relay: {e.message}"
        out.call_ns.append(time.perf_counter_ns() - t0)
        out.call_cpu_ns.append(time.thread_time_ns() - c0)
        events = policy.take()
        updates = _updates(events, cache, policy, told)
        if events or updates or capture.lines or (failed and keep_steps):
            step = Step(index, call.where, call.method, events, updates, capture.lines, failed)
            if keep_steps:
                _pools_after(step, policy)
            _note(out, step, keep_steps)
            capture.lines = []
        checker.after_call(f"call {index} ({call.where})", events)
        if check_every and index % check_every == 0:
            checker.full(f"after call {index}")
        if progress is not None:
            progress(index)
    out.wall_s = time.perf_counter() - t_start
    checker.full("at the end")
    out.policy_errors = resmgr.stats().policy_errors
    resmgr.retire()  # its deferred state save has nowhere to go
    return out


def _forward(call: Call) -> Callable[[Message], asyncio.Future[Message]]:
    """The runtime's side of the call: its recorded reply, or its recorded failure."""
    def forward(_request: Message) -> asyncio.Future[Message]:
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        if call.reply is not None:
            fut.set_result(call.reply)
        else:
            code = getattr(grpc.StatusCode, call.code, grpc.StatusCode.UNKNOWN)
            fut.set_exception(grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), call.details))
        return fut

    return forward


def _updates(events: list[Event], cache: Cache, policy: RecordingPolicy,
             told: dict[str, Resources]) -> dict[str, Resources]:
    """What the relay would send to containers other than the one decided on: as
    ResourceManager._sync, a live container whose resources differ from its last."""
    created = {e.key for e in events if e.action in ("allocate", "resize")}
    for e in events:
        if e.action in ("allocate", "resize") and e.decision.resources is not None:
            told[e.key] = e.decision.resources
        elif e.action == "release":
            told.pop(e.key, None)
    out: dict[str, Resources] = {}
    for key in {k for e in events for k in e.decision.others} - created:
        c = cache.containers.get(key)
        if c is None or c.released:
            continue
        target = policy.resources(key)
        if target is None or told.get(key) == target:
            continue
        told[key] = target
        out[key] = target
    return out


def _pools_after(step: Step, policy: RecordingPolicy) -> None:
    """The pools the step's decisions and updates name, as they are after it: a tool judges
    each step from the report alone."""
    for key in step.updates:
        a = policy.assignment(key)
        if a is not None:
            step.placed_in[key] = a.pool
    named = {e.assignment.pool for e in step.events if e.assignment is not None} | set(step.placed_in.values())
    if named:
        step.pools = {p.name: p for p in policy.usage().pools if p.name in named}


def _note(out: Outcome, step: Step, keep: bool) -> None:
    out.updates += len(step.updates)
    for e in step.events:
        out.decision_ns.append(e.ns)
        out.decision_cpu_ns.append(e.cpu_ns)
        if e.decision.warning:
            out.warnings.append(f"call {step.index} ({step.where}): {e.container}: {e.decision.warning}")
    out.messages += [f"call {step.index} ({step.where}): {m}" for m in step.messages]
    if keep:
        out.steps.append(step)
