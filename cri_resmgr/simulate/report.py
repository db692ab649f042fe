"""The simulation as an operator reads it (text) and as tools read it (JSON).

Each decision is the phrase the relay logs for it (engine/describe.py), so a
simulation and a live relay's log can be compared line by line; the final
allocation is the picture `cri-resmgr status` draws, from the same `/state`
document the relay serves.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cri_resmgr.engine import describe, snapshot
from cri_resmgr.policy.api import Resources
from cri_resmgr.simulate.engine import Outcome, Step
from cri_resmgr.simulate.recording import Event
from cri_resmgr.status import text as status_text
from cri_resmgr.status import view as status_view

__all__ = ["state_document", "render_text", "render_json", "timing", "decision_line"]

UPDATE_NAMES = 6  # containers named per group of updates in the text; the JSON names all


def state_document(o: Outcome) -> dict[str, Any]:
    """The final allocation as the relay's `/state` would serve it."""
    return snapshot.take(o.policy_name, o.policy, o.cache, snapshot.summarise(o.topology), o.config,
                         False).to_document()


def decision_line(e: Event) -> str:
    """`default/web:app: exclusive CPUs 2-3, mems 0` (as the relay logs it), or `... released`."""
    if e.action == "release":
        return f"{e.container}: released"
    r = e.decision.resources
    text = describe.placement(e.assignment, r) if r is not None else "not placed by the policy"
    return f"{e.container}: {'resized: ' if e.action == 'resize' else ''}{text}"


def timing(o: Outcome) -> dict[str, Any]:
    return {"decisions": _stats(o.decision_ns), "engine_calls": _stats(o.call_ns), "wall_s": round(o.wall_s, 3),
            "calls": o.calls, "intercepted": o.intercepted}


def _stats(ns: Sequence[int]) -> dict[str, float | int]:
    if not ns:
        return {"n": 0}
    s = sorted(ns)

    def pick(p: float) -> float:  # microseconds
        return round(s[min(len(s) - 1, int(p * len(s)))] / 1e3, 1)

    return {"n": len(s), "p50_us": pick(0.5), "p99_us": pick(0.99), "max_us": round(s[-1] / 1e3, 1),
            "total_ms": round(sum(s) / 1e6, 1)}


# -- text -----------------------------------------------------------------------------


def render_text(o: Outcome, workload: str, brief: bool = False, colour: bool = False) -> str:
    topo = o.topology
    lines = [f"Simulation of policy {o.policy_name}, configuration from {o.config.source}",
             f"Machine: {len(topo.online)} CPUs ({topo.online}), {_count(len(topo.package_ids()), 'package')}, "
             f"{_count(len(topo.cpu_node_ids()), 'NUMA node')} with CPUs"
             + (f", {len(topo.memory_only_node_ids())} memory-only" if topo.memory_only_node_ids() else ""),
             f"Workload: {workload}: {o.calls} calls, {o.intercepted} handed to the engine", ""]
    if not brief:
        lines.append("Decisions:")
        for step in o.steps:
            lines += _step_lines(step, o.policy.names)
        if not o.steps:
            lines.append("  none")
        lines.append("")
    lines += _listing("Warnings (requests not met)", o.warnings, brief)
    lines += _listing("Engine warnings and errors", o.messages, brief)
    if not brief:
        lines += ["Final allocation:", status_text.render(status_view.build(state_document(o)), colour), ""]
    else:
        pools = o.policy.usage().pool_cpus()
        lines += ["Final pools: " + ", ".join(f"{n} {c or '-'}" for n, c in sorted(pools.items())),
                  f"Containers alive: {sum(1 for c in o.cache if not c.released)}", ""]
    lines += _invariant_lines(o)
    t = timing(o)
    d, c = t["decisions"], t["engine_calls"]
    lines.append(f"Timing: {d['n']} decisions" + (f", the policy's p50 {d['p50_us']} us, p99 {d['p99_us']} us, max "
                                                   f"{d['max_us']} us" if d["n"] else "")
                 + (f"; the engine per call p50 {c['p50_us']} us, p99 {c['p99_us']} us" if c["n"] else "")
                 + f"; {o.updates} update{'' if o.updates == 1 else 's'} to other containers; "
                 f"{t['wall_s']} s for {o.calls} calls")
    return "\n".join(lines) + "\n"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _step_lines(step: Step, names: dict[str, str]) -> list[str]:
    lines = [f"  #{step.index} {step.method} ({step.where})" + (f": failed, {step.failed}" if step.failed else "")]
    for e in step.events:
        lines.append(f"    {decision_line(e)} [{e.ns / 1e3:.0f} us]")
        if e.decision.warning:
            lines.append(f"      warning: {e.decision.warning}")
    for r, who in _grouped(step.updates, names):
        shown = ", ".join(who[:UPDATE_NAMES]) + (f" and {len(who) - UPDATE_NAMES} more"
                                                  if len(who) > UPDATE_NAMES else "")
        lines.append(f"    update {len(who)} container{'s' if len(who) > 1 else ''} to CPUs {r.cpuset_cpus}, "
                     f"mems {r.cpuset_mems or '-'}: {shown}")
    lines += [f"    {m}" for m in step.messages]
    return lines


def _grouped(updates: dict[str, Resources], names: dict[str, str]) -> list[tuple[Resources, list[str]]]:
    groups: dict[Resources, list[str]] = {}
    for key, r in updates.items():
        groups.setdefault(r, []).append(names.get(key, key))
    return [(r, sorted(names)) for r, names in groups.items()]


def _listing(title: str, items: list[str], brief: bool) -> list[str]:
    if not items:
        return []
    limit = 20 if brief else len(items)
    more = [f"  ... and {len(items) - limit} more"] if len(items) > limit else []
    return [f"{title}: {len(items)}", *[f"  {w}" for w in items[:limit]], *more, ""]


def _invariant_lines(o: Outcome) -> list[str]:
    c = o.checker
    head = (f"Invariants: {c.checks} container checks after each call and {c.full_passes} full "
            f"pass{'es' if c.full_passes != 1 else ''}: ")
    if not c.count and not o.policy_errors:
        return [head + "all hold", ""]
    lines = [head + f"{c.count} violation{'s' if c.count != 1 else ''}"
             + (f", {o.policy_errors} policy errors" if o.policy_errors else "")]
    lines += [f"  {v}" for v in c.violations]
    if c.count > len(c.violations):
        lines.append(f"  ... and {c.count - len(c.violations)} more")
    return lines + [""]


# -- JSON -------------------------------------------------------------------------------


def render_json(o: Outcome, workload: str) -> str:
    c = o.checker
    topo = o.topology
    doc = {
        "format": "cri-resmgr-simulation", "version": 2, "policy": o.policy_name, "config_source": o.config.source,
        "workload": workload,
        # The machine as the policy saw it from the start: a tool needs no configuration parser.
        "machine": {"online": str(topo.online), "available": str(o.available), "reserved": str(o.reserved),
                    "isolated": str(topo.isolated & o.available), "threads_per_core": topo.threads_per_core(),
                    "nodes": {str(n): str(topo.node_cpus(n)) for n in topo.cpu_node_ids()}},
        "steps": [_step_doc(s, o.policy.names) for s in o.steps], "warnings": o.warnings,
        "messages": o.messages, "state": state_document(o),
        "invariants": {"container_checks": c.checks, "full_passes": c.full_passes, "violations": c.count,
                       "policy_errors": o.policy_errors, "first": c.violations},
        "timing": timing(o), "updates": o.updates,
    }
    return json.dumps(doc, indent=1) + "\n"


def _step_doc(s: Step, names: dict[str, str]) -> dict[str, Any]:
    return {"index": s.index, "where": s.where, "method": s.method, "failed": s.failed or None,
            "decisions": [_event_doc(e) for e in s.events],
            "updates": {names.get(key, key): {"cpus": str(r.cpuset_cpus), "mems": r.cpuset_mems,
                                               "pool": s.placed_in.get(key)}
                        for key, r in s.updates.items()},
            # after the step: each pool (balloon) named above, its own CPUs (a balloon's are
            # exclusive to it), the CPUs exclusive to single containers in it, what its
            # shared containers run on
            "pools": {name: {"kind": p.kind or None, "cpus": str(p.cpus), "exclusive": str(p.exclusive),
                             "runs_on": str(p.shared | p.exclusive) if p.kind else str(p.shared),
                             "mems": p.mems or None, "containers": len(p.containers),
                             "requested_milli": p.requested_milli, "hidden": str(p.hidden) or None}
                      for name, p in sorted(s.pools.items())},
            "messages": s.messages}


def _event_doc(e: Event) -> dict[str, Any]:
    r, a, w = e.decision.resources, e.assignment, e.workload
    return {"action": e.action, "container": e.container, "key": e.key,
            "qos": w.qos.value if w is not None else None,
            "requests": ({"cpu_milli": w.cpu_request, "cpu_limit_milli": w.cpu_limit,
                          "memory_bytes": w.memory_request, "memory_limit_bytes": w.memory_limit}
                         if w is not None else None),
            "cpus": str(r.cpuset_cpus) if r is not None else None, "mems": r.cpuset_mems if r is not None else None,
            "pool": a.pool if a is not None else None, "exclusive": str(a.exclusive) if a is not None else None,
            "others": len(e.decision.others),
            "warning": e.decision.warning, "us": round(e.ns / 1e3, 1), "text": decision_line(e)}
