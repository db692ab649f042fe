"""CPUSet: an immutable set of CPU ids with the kernel's list syntax.

The kernel writes CPU lists as comma-separated ids and inclusive ranges
("0-3,8,10-11"); sysfs, cgroup cpuset files and the CRI all use that form, so
parsing and formatting live beside the set type itself.

The set wraps a frozenset: membership and set algebra run in C, which matters
because the allocator and policies call them on every decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["CPUSet", "parse_cpulist", "format_cpulist", "MAX_CPU_ID"]

# Linux's largest NR_CPUS is 8192; a list naming a CPU past this is not of a real
# machine (and "0-4294967295" would otherwise be four billion ints).
MAX_CPU_ID = 16383


def _shown(text: str) -> str:
    """The CPU list as errors show it: a line of at most some sixty characters."""
    text = " ".join(text.split())
    return repr(text) if len(text) <= 60 else f"{text[:57]!r}... ({len(text)} characters)"


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse kernel list syntax into a frozenset of ids.

    Empty or whitespace-only text is the empty set. Whitespace around items
    and a trailing newline (as read from sysfs) are tolerated.
    """
    if not isinstance(text, str):
        raise TypeError(f"CPU list must be a str, not {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        return frozenset()
    cpus: set[int] = set()
    for raw_item in stripped.split(","):
        item = raw_item.strip()
        first, sep, last = item.partition("-")
        try:
            lo = _parse_id(first)
            hi = _parse_id(last) if sep else lo
        except ValueError:
            raise ValueError(f"invalid CPU list {_shown(text)}: bad item {_shown(item)}") from None
        if hi < lo:
            raise ValueError(f"invalid CPU list {_shown(text)}: descending range {_shown(item)}")
        if hi > MAX_CPU_ID:
            raise ValueError(f"invalid CPU list {_shown(text)}: CPU {hi} is past the largest possible "
                             f"CPU id ({MAX_CPU_ID})")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def _parse_id(text: str) -> int:
    text = text.strip()
    # int() alone would accept "+3", "3_0" and non-ASCII digits.
    if not text or not text.isascii() or not text.isdigit() or len(text) > 30:
        raise ValueError(text)
    return int(text)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format ids in kernel list syntax: ascending, runs of two or more as ranges."""
    parts: list[str] = []
    run_start = run_end = None
    for cpu in sorted(cpus):
        if run_end is not None and cpu == run_end + 1:
            run_end = cpu
            continue
        if run_start is not None:
            parts.append(_format_run(run_start, run_end))
        run_start = run_end = cpu
    if run_start is not None:
        parts.append(_format_run(run_start, run_end))
    return ",".join(parts)


def _format_run(start: int, end: int | None) -> str:
    return str(start) if start == end else f"{start}-{end}"


class CPUSet:
    """Immutable, hashable set of non-negative CPU ids; iterates ascending.

    Build from an iterable of ints, or from a kernel list string:
    ``CPUSet([0, 1, 2])``, ``CPUSet("0-2")``, ``CPUSet.parse("0-2\\n")``.
    """

    # _sorted and _text are computed once, on first use: the set never changes, and a
    # policy's decision on a big sparse machine would otherwise format the same shared
    # pool's text (some 0.2 ms at 4096 CPUs) for every container it updates and logs.
    __slots__ = ("_cpus", "_sorted", "_text")

    _cpus: frozenset[int]
    _sorted: tuple[int, ...] | None
    _text: str | None

    def __init__(self, cpus: Iterable[int] | str = ()) -> None:
        if isinstance(cpus, str):
            frozen = parse_cpulist(cpus)
        elif isinstance(cpus, CPUSet):
            frozen = cpus._cpus
        else:
            frozen = frozenset(cpus)
            for cpu in frozen:
                # bool is an int subclass; True as CPU 1 is always a bug.
                if type(cpu) is not int or cpu < 0:
                    raise ValueError(f"invalid CPU id {cpu!r}: must be a non-negative int")
        object.__setattr__(self, "_cpus", frozen)
        object.__setattr__(self, "_sorted", None)
        object.__setattr__(self, "_text", None)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse kernel list syntax; raises ValueError naming the bad text."""
        return cls._wrap(parse_cpulist(text))

    @classmethod
    def _wrap(cls, frozen: frozenset[int]) -> CPUSet:
        # Skips validation: callers pass sets derived from valid CPUSets.
        obj = object.__new__(cls)
        object.__setattr__(obj, "_cpus", frozen)
        object.__setattr__(obj, "_sorted", None)
        object.__setattr__(obj, "_text", None)
        return obj

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CPUSet is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("CPUSet is immutable")

    # -- views ---------------------------------------------------------------

    def as_frozenset(self) -> frozenset[int]:
        return self._cpus

    def sorted(self) -> tuple[int, ...]:
        """The ids in ascending order (cached)."""
        ordered = self._sorted
        if ordered is None:
            ordered = tuple(sorted(self._cpus))
            object.__setattr__(self, "_sorted", ordered)
        return ordered

    def __iter__(self) -> Iterator[int]:
        return iter(self.sorted())

    def __len__(self) -> int:
        return len(self._cpus)

    def __bool__(self) -> bool:
        return bool(self._cpus)

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._cpus

    def __hash__(self) -> int:
        return hash(self._cpus)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CPUSet):
            return self._cpus == other._cpus
        return NotImplemented

    def __str__(self) -> str:
        """Kernel list syntax (cached)."""
        text = self._text
        if text is None:
            text = format_cpulist(self.sorted())
            object.__setattr__(self, "_text", text)
        return text

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"

    def __reduce__(self) -> tuple[type[CPUSet], tuple[str]]:
        return (CPUSet, (str(self),))

    def min(self) -> int:
        if not self._cpus:
            raise ValueError("min() of an empty CPUSet")
        return self.sorted()[0]

    def max(self) -> int:
        if not self._cpus:
            raise ValueError("max() of an empty CPUSet")
        return self.sorted()[-1]

    # -- algebra ---------------------------------------------------------------

    def union(self, *others: Iterable[int]) -> CPUSet:
        return CPUSet._wrap(self._cpus.union(*(_frozen(o) for o in others)))

    def intersection(self, *others: Iterable[int]) -> CPUSet:
        return CPUSet._wrap(self._cpus.intersection(*(_frozen(o) for o in others)))

    def difference(self, *others: Iterable[int]) -> CPUSet:
        return CPUSet._wrap(self._cpus.difference(*(_frozen(o) for o in others)))

    def symmetric_difference(self, other: Iterable[int]) -> CPUSet:
        return CPUSet._wrap(self._cpus.symmetric_difference(_frozen(other)))

    def issubset(self, other: Iterable[int]) -> bool:
        return self._cpus.issubset(_frozen(other))

    def issuperset(self, other: Iterable[int]) -> bool:
        return self._cpus.issuperset(_frozen(other))

    def isdisjoint(self, other: Iterable[int]) -> bool:
        return self._cpus.isdisjoint(_frozen(other))

    def __or__(self, other: object) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet._wrap(self._cpus | other._cpus)

    def __and__(self, other: object) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet._wrap(self._cpus & other._cpus)

    def __sub__(self, other: object) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet._wrap(self._cpus - other._cpus)

    def __xor__(self, other: object) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet._wrap(self._cpus ^ other._cpus)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._cpus <= other._cpus

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._cpus < other._cpus

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._cpus >= other._cpus

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._cpus > other._cpus


def _frozen(cpus: Iterable[int]) -> frozenset[int]:
    if isinstance(cpus, CPUSet):
        return cpus._cpus
    if isinstance(cpus, frozenset):
        return cpus
    return CPUSet(cpus)._cpus
