"""Who holds each CPU, from the `/state` document alone (text and SVG draw this).

A CPU is held by the container(s) with it exclusive; otherwise it is marked with the
pools it is in (shared, reserved: under the static policy the reserved CPUs are in
the shared pool too, unless StrictReservation), isolated (the kernel's isolcpus, unused
by the relay), idle (online, in no pool: not available to the policy, or no policy in
force) or offline. Under policies with many pools (balloons, a pool tree) a CPU in none
of those is marked with the smallest other pool that holds it (`dataplane[0]`); a
HideHyperthreads balloon's sibling threads, which its containers do not run on, are marked
as the balloon's and hidden (the pool table's `hidden_cpus`); the
pool table lists each pool with its kind, parent, CPUs, memory nodes, containers and
requested CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cri_resmgr.topology.cpuset import CPUSet

# Pool names of the policies (policy/pools.py) that mark a CPU, in the order they are named.
MARKED_POOLS = ("shared", "reserved", "isolated")
# Not a pool a CPU belongs to: every exclusive CPU, whatever its pool (pool_cpus()).
NOT_MARKING = frozenset({"exclusive"})
IDLE = "idle"
NOT_MANAGED = "not managed"  # a container seen running under the none policy
OFFLINE = "offline"


class StateError(ValueError):
    """The document is not a `/state` document this version understands."""


@dataclass(frozen=True)
class Cell:
    cpu: int
    label: str  # the holder's short name, or the pools: "shared", "shared/reserved", "idle"
    holder: int | None  # index into View.containers of the exclusive holder; None: no one
    sharers: tuple[str, ...] = ()  # short names of the containers running on it shared (not exclusive)
    hidden: bool = False  # the pool's (label) though its containers do not run on it: a hidden hyperthread


@dataclass(frozen=True)
class Row:
    """One container as the table shows it."""

    short: str  # unique among the containers: the name, else pod:name, else namespace/pod:name
    namespace: str
    pod: str
    name: str
    qos: str
    cpu_request: str
    pool: str
    exclusive: str
    shared: str
    mems: str
    id: str
    blockio: str = "-"  # block I/O class (docs/classes.md)
    rdt: str = "-"  # RDT class
    sched: str = "-"  # scheduling class
    wanted: int = 0  # exclusive CPUs its policy gives it when it can
    unmet: bool = False  # it holds fewer: a request not met (the policy warned when it decided)

    @property
    def exclusive_shown(self) -> str:
        """The EXCLUSIVE column: its CPUs, and what it wants when that is not met."""
        return f"{self.exclusive} (wants {self.wanted})" if self.unmet else self.exclusive


@dataclass(frozen=True)
class PoolRow:
    """One pool of the document's pool table."""

    name: str
    kind: str
    parent: str
    cpus: str
    runs_on: str  # what its containers run on (its shared CPUs, lent ones included)
    mems: str
    containers: int
    requested: str


POOL_HEADERS = ("POOL", "KIND", "PARENT", "CPUS", "RUNS ON", "MEMS", "CONTAINERS", "REQUESTED")

Cores = tuple[tuple[int | None, tuple[Cell, ...]], ...]
Machine = tuple[tuple[int | None, tuple[tuple[int, Cores], ...]], ...]


@dataclass(frozen=True)
class View:
    policy: str
    source: str
    dry_run: bool
    # (package, ((node, ((core, (cells...)), ...)), ...)); None ids where the kernel gave none
    machine: Machine
    offline: str
    pools: tuple[tuple[str, str], ...]
    containers: tuple[Row, ...]
    pool_table: tuple[PoolRow, ...] = ()  # only when some pool has a kind (balloons, a pool tree)
    reload: str = ""  # the last configuration tried, as a line ("" in documents from before it was kept)
    stamp: str = ""  # node, time and relay version: `node n1, 2026-11-27 14:50:01 UTC, cri-resmgr 0.1.0`
    cpu_classes: str = ""  # `CPU classes: turbo 2-3, eco 0-1` ("" when none)
    cpu_class_failures: tuple[str, ...] = ()  # one line per file whose last write was refused
    warnings: tuple[str, ...] = ()  # what the kernel refuses or narrows of what was decided, one line each

    @property
    def unmet(self) -> tuple[Row, ...]:
        """The containers holding fewer exclusive CPUs than their policy gives when it can."""
        return tuple(r for r in self.containers if r.unmet)

    def unmet_line(self, names: int = 8) -> str:
        """`Requests not met: 2 containers hold fewer exclusive CPUs than they ask for: g:c (- of 1), ...`."""
        rows = self.unmet
        if not rows:
            return ""
        held = [f"{r.short} ({len(CPUSet.parse(r.exclusive)) if r.exclusive != '-' else 0} of {r.wanted})"
                for r in rows[:names]]
        more = f", and {len(rows) - names} more" if len(rows) > names else ""
        verb = "container holds" if len(rows) == 1 else "containers hold"
        return (f"Requests not met: {len(rows)} {verb} fewer exclusive CPUs than asked for: "
                f"{', '.join(held)}{more}")


def build(doc: Mapping[str, Any]) -> View:
    if doc.get("format") != "cri-resmgr-state" or doc.get("version") != 1:
        raise StateError("not a cri-resmgr state document of version 1 (format, version: "
                         f"{doc.get('format')!r}, {doc.get('version')!r})")
    containers: Sequence[Mapping[str, Any]] = doc["containers"]
    rows = tuple(_row(c, short) for c, short in zip(containers, _short_names(containers), strict=True))
    holders: dict[int, int] = {}
    sharing: dict[int, list[str]] = {}
    for i, c in enumerate(containers):
        for cpu in CPUSet.parse(c["exclusive_cpus"]):
            holders.setdefault(cpu, i)  # a CPU given twice would be a bug; the table shows both
        if c.get("pool") is not None:  # placed: its shared CPUs show who runs there (a pool tree's nodes)
            for cpu in CPUSet.parse(c.get("shared_cpus") or ""):
                sharing.setdefault(cpu, []).append(rows[i].short)
    pools = {name: CPUSet.parse(cpus) for name, cpus in doc["pools"].items()}
    hidden = {cpu: p["name"] for p in doc.get("pool_table") or () for cpu in CPUSet.parse(p.get("hidden_cpus") or "")}
    others = sorted(((len(c), n, c) for n, c in pools.items() if n not in MARKED_POOLS and n not in NOT_MARKING))
    topo = doc.get("topology")
    machine: Machine = ()
    offline = ""
    if topo is not None:
        machine = tuple((pkg["id"], tuple((node["id"], tuple(
            (core["id"], tuple(_cell(cpu, holders, rows, pools, others, tuple(sharing.get(cpu, ())), hidden)
                               for cpu in core["cpus"]))
            for core in node["cores"])) for node in pkg["nodes"])) for pkg in topo["packages"])
        offline = topo["offline"]
    config = doc.get("config") or {}
    return View(policy=doc["policy"], source=config.get("source", "none in force"), dry_run=bool(doc["dry_run"]),
                machine=machine, offline=offline, pools=_pools_line(pools, doc.get("pool_table") or ()),
                containers=rows, pool_table=_pool_table(doc.get("pool_table") or ()),
                reload=_reload(doc.get("reload")), stamp=_stamp(doc), warnings=_warnings(doc),
                cpu_classes=_cpu_classes(doc.get("cpu_classes")),
                cpu_class_failures=tuple(f"CPU class write refused: {f.get('value')!r} to {f.get('path')}: "
                                         f"{f.get('error')}" for f in doc.get("cpu_class_failures") or ()))


def _cpu_classes(classes: Mapping[str, str] | None) -> str:
    """`CPU classes: turbo 2-3, eco 0-1` (documents from before CPU classes have none)."""
    if not classes:
        return ""
    return "CPU classes: " + ", ".join(f"{name} {cpus}" for name, cpus in classes.items())


def _warnings(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """Containers the kernel keeps on fewer CPUs than decided (a parent cgroup narrowed:
    docs/cgroups.md), and the block I/O lines it refuses (docs/classes.md)."""
    narrowed = tuple(f"{c['namespace']}/{c['pod']}:{c['name']} runs on CPUs {c['effective_cpus']} only, not "
                     f"{c['cpus']}: cgroup {c['narrowed_by']} narrows it" for c in doc["containers"]
                     if c.get("narrowed_by") and c.get("effective_cpus") is not None)
    return narrowed + tuple(
        f"block I/O class {r['class']}: the kernel refuses {r['line']!r} in {r['file']}: {r['reason']}; "
        f"{r['containers']} container{'' if r['containers'] == 1 else 's'} (first {r['example']}: {r['path']})"
        for r in doc.get("blockio_refused") or ())


def _stamp(doc: Mapping[str, Any]) -> str:
    parts = [f"node {doc['node']}" if doc.get("node") else "",
             utc(doc["taken_at"]) if isinstance(doc.get("taken_at"), (int, float)) else "",
             f"cri-resmgr {doc['relay_version']}" if doc.get("relay_version") else ""]
    return ", ".join(p for p in parts if p)


def _reload(r: Mapping[str, Any] | None) -> str:
    """`Last reload: OK at ... UTC (source)`, or FAILED with the error and when one last went in."""
    if not r or r.get("ok") is None:
        return ""
    line = f"Last reload: {'OK' if r['ok'] else 'FAILED'} at {utc(r['at'])} ({r.get('source') or '?'})"
    if not r["ok"]:
        since = r.get("last_success_at")
        line += f": {r.get('error')}; in force: the previous configuration" + \
            (f", since {utc(since)}" if since else "")
    return line


def utc(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pool_table(table: Sequence[Mapping[str, Any]]) -> tuple[PoolRow, ...]:
    if not any(p.get("kind") for p in table):
        return ()  # the simple policies' pools are all in the Pools line already
    return tuple(PoolRow(name=p["name"], kind=p.get("kind") or "-", parent=p.get("parent") or "-",
                         cpus=p.get("cpus") or "-", runs_on=_runs_on(p), mems=p.get("mems") or "-",
                         containers=int(p.get("containers", 0)), requested=_milli(int(p.get("requested_milli", 0))))
                 for p in table)


def _pools_line(pools: Mapping[str, CPUSet], table: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The `Pools:` summary: each pool's CPUs; with a pool table (balloons, a pool tree), each
    of its pools as its RUNS ON column gives them (a dedicated balloon's CPUs are its
    container's own, not `-`), and no empty `reserved` beside a reserved balloon."""
    shown = [(n, str(c) or "-") for n, c in pools.items()]
    if not any(p.get("kind") for p in table):
        return tuple(shown)
    runs = {p["name"]: _runs_on(p) for p in table}
    has_reserved = any(p.get("kind") == "reserved" for p in table)
    return tuple((n, runs.get(n, c)) for n, c in shown
                 if not (n == "reserved" and n not in runs and c == "-" and has_reserved))


def _runs_on(p: Mapping[str, Any]) -> str:
    """What a pool's containers run on: its shared CPUs; a pool with no parent (a balloon)
    whose CPUs are its one container's own gives them as exclusive, lent ones as shared."""
    shared = p.get("shared_cpus") or ""
    exclusive = p.get("exclusive_cpus") or ""
    if exclusive and not p.get("parent"):
        return str(CPUSet.parse(exclusive) | CPUSet.parse(shared)) or "-"
    return shared or "-"


def _cell(cpu: int, holders: Mapping[int, int], rows: Sequence[Row], pools: Mapping[str, CPUSet],
          others: Sequence[tuple[int, str, CPUSet]] = (), sharers: tuple[str, ...] = (),
          hidden: Mapping[int, str] | None = None) -> Cell:
    holder = holders.get(cpu)
    if holder is not None:
        return Cell(cpu, rows[holder].short, holder, sharers)
    marks = [name for name in MARKED_POOLS if cpu in pools.get(name, CPUSet())]
    if not marks and hidden and cpu in hidden:  # a HideHyperthreads balloon's sibling: the balloon's, unused
        return Cell(cpu, hidden[cpu], None, sharers, hidden=True)
    if not marks:
        # The smallest other pool holding it: a balloon, or the leaf of a pool tree.
        marks = [name for _, name, cpus in others if cpu in cpus][:1]
    return Cell(cpu, "/".join(marks) or IDLE, None, sharers)


def _short_names(containers: Sequence[Mapping[str, Any]]) -> list[str]:
    """The container's name when no other container has it; else pod:name; else the full name."""
    def count(key: str) -> dict[str, int]:
        seen: dict[str, int] = {}
        for k in keys[key]:
            seen[k] = seen.get(k, 0) + 1
        return seen

    keys = {"name": [c["name"] for c in containers],
            "pod": [f"{c['pod']}:{c['name']}" for c in containers],
            "full": [f"{c['namespace']}/{c['pod']}:{c['name']}" for c in containers]}
    by_name, by_pod = count("name"), count("pod")
    return [n if by_name[n] == 1 else p if by_pod[p] == 1 else f
            for n, p, f in zip(keys["name"], keys["pod"], keys["full"], strict=True)]


def _row(c: Mapping[str, Any], short: str) -> Row:
    return Row(short=short, namespace=c["namespace"], pod=c["pod"], name=c["name"], qos=c["qos"] or "-",
               cpu_request=_milli(c["requests"]["cpu_milli"]),
               pool=c["pool"] or (NOT_MANAGED if c.get("managed") is False else "-"),
               exclusive=c["exclusive_cpus"] or "-", shared=c["shared_cpus"] or "-", mems=c["mems"] or "-",
               id=(c["id"] or "creating")[:12], blockio=c.get("blockio_class") or "-",
               rdt=c.get("rdt_class") or "-", sched=c.get("sched_class") or "-",
               wanted=int(c.get("exclusive_wanted") or 0), unmet=bool(c.get("request_unmet")))


def _milli(value: int) -> str:
    return "-" if not value else f"{value // 1000}" if value % 1000 == 0 else f"{value}m"
