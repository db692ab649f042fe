"""CPU classes, enforced by the resource manager itself (any runtime, the relay and the
plugin alike): after every decision of the policy (`decided`, called where the engine
tells the runtime of it, engine/resmgr.py `_sync`), each CPU's class is worked out from
the policy's allocation state (classes/cpuplan.py) and only the files whose value that
changes are written (classes/cpufreq.py), before the container the decision was for
starts. A configuration's classes are checked against this machine in `prepare`, before
anything in force changes: what its kernel would refuse is refused, with the key; what it
lacks altogether (no cpufreq, as on these VMs) is one warning per kind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

from cri_resmgr.bounded import short
from cri_resmgr.classes import cpuplan
from cri_resmgr.classes.cpufreq import CpuFreqWriter, Failure
from cri_resmgr.classes.hostfs import HostFiles
from cri_resmgr.config.classes import ClassConfigError
from cri_resmgr.config.schema import ConfigError
from cri_resmgr.engine import originals
from cri_resmgr.engine.cache import Cache
from cri_resmgr.policy.api import Policy
from cri_resmgr.policy.cpuclasses import ANNOTATION, CpuClassed, CpuClassLayout
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet

log = logging.getLogger(__name__)

ORIGINALS_FILE = "cpu-class-originals.json"  # in the state directory (engine/originals.py): what the
# CPUs' files held before any class, so that a restart followed by a CPU leaving its class
# (or a configuration without classes) gives the value of before the first run back


@dataclass(frozen=True)
class CpuClassStats:
    """For metrics and /state: each class's CPUs now, the writes refused (by path: the
    value and the kernel's error) and counters."""

    cpus: Mapping[str, CPUSet] = field(default_factory=dict)
    failed: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    writes: int = 0
    failures: int = 0
    unknown: int = 0  # annotations naming a class the configuration does not have


@dataclass(frozen=True)
class Prepared:
    """A configuration's classes checked on this machine."""

    classes: Mapping[str, object]
    host: cpuplan.CpuHost | None  # None: no classes


def layout_of(policy: Policy | None) -> CpuClassLayout:
    """The policy's CPU classes. `cpu_classes` is looked up, not `isinstance` of the
    runtime-checkable protocol (~10 us: it looks every member up)."""
    f = getattr(policy, "cpu_classes", None)
    return cast(CpuClassed, policy).cpu_classes() if f is not None else CpuClassLayout()


class CpuClassControl:
    """One per controller; survives policy switches. `files` is the host (a dry-run wraps it)."""

    def __init__(self, files: HostFiles, note: Callable[[str], None] | None = None, saved: str | None = None):
        """`saved`: the file keeping, across restarts, what the CPUs' files held before the
        first class was written (None: kept in this process only)."""
        self._files = files
        self._writer = CpuFreqWriter(files, note)
        self._saved = saved
        if saved is not None:
            self._writer.adopt(originals.load(saved, "CPU classes", "the CPUs"))
        self._prepared: Prepared | None = None  # None: no configuration applied yet
        self._fresh = True  # no decision seen yet: files held since an earlier run are looked at
        self._applied: dict[str, str] = {}  # what the files hold by our writes, by path
        self._assignment: dict[int, str] = {}
        self._failed: dict[str, tuple[str, str]] = {}
        self._warned: set[str] = set()
        self._unknown_warned: dict[str, str] = {}  # container key -> the unknown class it was warned of
        self._failures = 0
        self._unknown = 0
        self._stats = CpuClassStats()

    def stats(self) -> CpuClassStats:
        """Safe from another thread (metrics): a snapshot replaced, never changed, on the loop."""
        return self._stats

    def prepare(self, policy: Policy | None, topology: Callable[[], Topology], source: str,
                warn: bool = True) -> Prepared:
        """`policy`'s classes on this machine; raises ConfigError naming the key when
        its kernel would refuse one. `warn`: say what cannot take effect here (the check
        before the start does not: the start says it)."""
        layout = layout_of(policy)
        if layout.empty:
            return Prepared({}, None)
        topo = topology()
        # A kernel without die_id (-1) has one die per package: the uncore driver says die 00.
        die_of = {cpu: (info.package, max(info.die, 0)) for cpu, info in topo.cpus.items()}
        host = self._writer.host(sorted(topo.online), die_of)
        try:
            notes = cpuplan.check(layout.classes.values(), host)
        except ClassConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        for note in notes if warn else ():
            if note not in self._warned:
                self._warned.add(note)
                log.warning("%s: %s", source, note)
        return Prepared(dict(layout.classes), host)

    def switch(self, prepared: Prepared) -> None:
        if prepared != self._prepared:  # a class's values, or what the machine offers: all worked out again
            self._assignment = {}
        self._prepared = prepared

    def decided(self, policy: Policy | None, cache: Cache | None) -> None:
        """After a decision (lock held): the CPUs whose class changed get it."""
        p = self._prepared
        if p is None:
            return  # a policy restored before the first configuration is in force: it calls again
        if p.host is None or policy is None or cache is None:  # every decision of a node without classes
            if not self._applied and not self._writer.holds():
                return
            held = set(self._applied) | set(self._writer.originals())
            if held:  # no classes (any more, or since a restart): back to what was there
                self._write(dict.fromkeys(held))
                self._applied = {}
                self._assignment = {}
                self._counted()
            return
        layout = layout_of(policy)
        if dict(layout.classes) != p.classes:
            return  # a policy being switched in before its configuration: the controller calls again
        usage = policy.usage()
        chosen = self._chosen(layout, usage.exclusive, cache) if layout.annotations else {}
        assignment = cpuplan.assign(layout, usage, chosen)
        if assignment == self._assignment and not self._failed and not self._fresh:
            return
        self._fresh = False
        self._assignment = assignment
        wanted = cpuplan.wanted(assignment, layout.classes, p.host)
        changes = cpuplan.changes(self._applied, wanted)
        for path in self._writer.originals():  # held since an earlier run, wanted by no class now
            if path not in wanted:
                changes.setdefault(path, None)
        self._write(changes)
        self._counted()

    def _chosen(self, layout: CpuClassLayout, exclusive: Mapping[str, CPUSet], cache: Cache) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for key in exclusive:
            c = cache.containers.get(key)
            if c is None:
                continue
            raw = c.workload.effective_annotation(ANNOTATION)
            if raw is None:
                continue
            name = raw.strip()
            if name in layout.classes:
                out[key] = name
                continue
            out[key] = None  # a class asked for by name is not replaced by another
            if self._unknown_warned.get(key) != name:
                self._unknown_warned[key] = name
                self._unknown += 1
                log.warning("%s: CPU class %s is not in the configuration (classes: %s); its exclusive CPUs "
                            "run without one", c.workload, short(name), ", ".join(sorted(layout.classes)))
        for key in [k for k in self._unknown_warned if k not in exclusive]:
            del self._unknown_warned[key]
        return out

    def _write(self, changes: Mapping[str, str | None]) -> None:
        if not changes:
            return
        before = self._writer.originals()
        failures = {f.path: f for f in self._writer.apply(changes)}
        if self._saved is not None and self._writer.originals() != before:
            originals.save(self._saved, self._writer.originals(), "CPU classes")
        for path, value in changes.items():
            f = failures.get(path)
            if f is None:
                self._failed.pop(path, None)
                if value is None:
                    self._applied.pop(path, None)
                else:
                    self._applied[path] = value
                continue
            self._note_failure(f)
            self._applied.pop(path, None)  # tried again at the next decision

    def _note_failure(self, f: Failure) -> None:
        self._failures += 1
        if self._failed.get(f.path) != (f.value, f.error):
            log.error("CPU class: writing %r to %s failed: %s", f.value, self._writer.show(f.path), f.error)
        self._failed[f.path] = (f.value, f.error)

    def _counted(self) -> None:
        self._stats = CpuClassStats(cpus=cpuplan.by_class(self._assignment), failed=dict(self._failed),
                                    writes=self._writer.count, failures=self._failures, unknown=self._unknown)
