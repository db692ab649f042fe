"""CPUSet: an immutable set of CPU ids with the kernel's list syntax.

The kernel writes CPU lists as comma-separated ids and inclusive ranges
("0-3,8,10-11"); sysfs, cgroup cpuset files and the CRI all use that form, so
parsing and formatting live beside the set type itself.

The set is a bitmask (an int, bit i for CPU i): union, intersection, difference,
subset tests and counting are a few machine words per 64 CPUs, run in C, whatever
the number of CPUs in the set. On a 4096-CPU machine a policy's decision does
dozens of these on sets of thousands of CPUs; as frozensets each cost tens of
microseconds (issue 37), as masks well under one. The ids in order, the frozenset
and the text are worked out from the mask when first asked for, and kept (the set
never changes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from itertools import compress, repeat

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
    return frozenset(_ids(_parse_mask(text)))


def _parse_mask(text: str) -> int:
    """Kernel list syntax as a bitmask; raises ValueError naming the bad text."""
    if not isinstance(text, str):
        raise TypeError(f"CPU list must be a str, not {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        return 0
    mask = 0
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
        mask |= ((1 << (hi - lo + 1)) - 1) << lo
    return mask


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


# bin()'s digits, reversed, as 0/1 bytes: itertools.compress then picks the ids in C.
_BIT = bytes.maketrans(b"01", b"\x00\x01")
# One byte per id (0 or 1), reversed, as bin() digits: int(..., 2) packs them in C.
_DIGIT = bytes.maketrans(b"\x00\x01", b"01")
_FEW = 24  # below this many ids a plain loop over the bits is cheaper


def _ids(mask: int) -> tuple[int, ...]:
    """The set bits of `mask`, ascending."""
    if not mask:
        return ()
    if mask.bit_count() <= _FEW:
        out = []
        while mask:
            low = mask & -mask
            out.append(low.bit_length() - 1)
            mask ^= low
        return tuple(out)
    first = (mask & -mask).bit_length() - 1
    bits = bin(mask >> first)[:1:-1].encode().translate(_BIT)
    return tuple(compress(range(first, first + len(bits)), bits))


_FEW_RUNS = 64


def _format_runs(mask: int) -> str:
    """Kernel list syntax straight from a bitmask, run by run."""
    parts = []
    while mask:
        first = (mask & -mask).bit_length() - 1
        rest = mask >> first
        length = (~rest & (rest + 1)).bit_length() - 1  # the ones from `first` up
        parts.append(_format_run(first, first + length - 1))
        mask ^= ((1 << length) - 1) << first
    return ",".join(parts)


def _mask_of(ids: Iterable[int]) -> int:
    """The bitmask of valid ids (non-negative ints up to MAX_CPU_ID), checking each."""
    if type(ids) is range and ids.step == 1:
        if not ids:
            return 0
        _check(ids.start)
        _check(ids.stop - 1)
        return ((1 << len(ids)) - 1) << ids.start
    if not isinstance(ids, (set, frozenset, list, tuple)):
        ids = list(ids)
    if not ids:
        return 0
    # The checks and the scatter run in C (map); a bad id is looked for only once
    # one is known to be there. bool is an int subclass; True as CPU 1 is always a bug.
    if set(map(type, ids)) != {int} or min(ids) < 0 or max(ids) > MAX_CPU_ID:
        for cpu in ids:
            _check(cpu)
    if len(ids) <= _FEW:
        mask = 0
        for cpu in ids:
            mask |= 1 << cpu
        return mask
    digits = bytearray(max(ids) + 1)
    deque(map(digits.__setitem__, ids, repeat(1)), maxlen=0)
    digits.reverse()
    return int(digits.translate(_DIGIT), 2)


def _check(cpu: object) -> None:
    if type(cpu) is not int or cpu < 0:
        raise ValueError(f"invalid CPU id {cpu!r}: must be a non-negative int")
    if cpu > MAX_CPU_ID:
        raise ValueError(f"invalid CPU id {cpu}: past the largest possible CPU id ({MAX_CPU_ID})")


class CPUSet:
    """Immutable, hashable set of non-negative CPU ids; iterates ascending.

    Build from an iterable of ints, or from a kernel list string:
    ``CPUSet([0, 1, 2])``, ``CPUSet("0-2")``, ``CPUSet.parse("0-2\\n")``.
    """

    # _mask is the set; the others are worked out from it on first use, once (the
    # set never changes): a policy's decision on a big sparse machine would otherwise
    # list or format the same shared pool (some 0.2 ms at 4096 CPUs) for every
    # container it updates and logs.
    __slots__ = ("_mask", "_cpus", "_sorted", "_text")

    _mask: int
    _cpus: frozenset[int] | None
    _sorted: tuple[int, ...] | None
    _text: str | None

    def __init__(self, cpus: Iterable[int] | str = ()) -> None:
        if isinstance(cpus, str):
            mask = _parse_mask(cpus)
        elif isinstance(cpus, CPUSet):
            mask = cpus._mask
        else:
            mask = _mask_of(cpus)
        object.__setattr__(self, "_mask", mask)
        object.__setattr__(self, "_cpus", None)
        object.__setattr__(self, "_sorted", None)
        object.__setattr__(self, "_text", None)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse kernel list syntax; raises ValueError naming the bad text."""
        return cls.of_mask(_parse_mask(text))

    @classmethod
    def of_mask(cls, mask: int) -> CPUSet:
        """The set whose ids are the bits of `mask` (a non-negative int, bit i for CPU i)."""
        obj = object.__new__(cls)
        object.__setattr__(obj, "_mask", mask)
        object.__setattr__(obj, "_cpus", None)
        object.__setattr__(obj, "_sorted", None)
        object.__setattr__(obj, "_text", None)
        return obj

    @classmethod
    def _wrap(cls, frozen: frozenset[int]) -> CPUSet:
        # Skips validation: callers pass sets derived from valid CPUSets.
        obj = cls.of_mask(_mask_of(frozen))
        object.__setattr__(obj, "_cpus", frozen)
        return obj

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CPUSet is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("CPUSet is immutable")

    # -- views ---------------------------------------------------------------

    def as_mask(self) -> int:
        """The set as a bitmask: bit i for CPU i."""
        return self._mask

    def as_frozenset(self) -> frozenset[int]:
        cpus = self._cpus
        if cpus is None:
            cpus = frozenset(self.sorted())
            object.__setattr__(self, "_cpus", cpus)
        return cpus

    def sorted(self) -> tuple[int, ...]:
        """The ids in ascending order (cached)."""
        ordered = self._sorted
        if ordered is None:
            ordered = _ids(self._mask)
            object.__setattr__(self, "_sorted", ordered)
        return ordered

    def __iter__(self) -> Iterator[int]:
        return iter(self.sorted())

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def __contains__(self, cpu: object) -> bool:
        if not isinstance(cpu, int) or cpu < 0:
            return False
        return bool(self._mask >> cpu & 1)

    def __hash__(self) -> int:
        return hash(self._mask)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CPUSet):
            return self._mask == other._mask
        return NotImplemented

    def __str__(self) -> str:
        """Kernel list syntax (cached)."""
        text = self._text
        if text is None:
            mask = self._mask
            # A set of few runs (a pool of whole nodes: thousands of CPUs, a few ranges) is
            # written run by run from the mask, a few word operations each; a fragmented
            # one (many runs) from the ids, which a run-by-run walk would cost more.
            if self._sorted is None and (mask & ~(mask << 1)).bit_count() <= _FEW_RUNS:
                text = _format_runs(mask)
            else:
                text = format_cpulist(self.sorted())
            object.__setattr__(self, "_text", text)
        return text

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"

    def __reduce__(self) -> tuple[type[CPUSet], tuple[str]]:
        return (CPUSet, (str(self),))

    def min(self) -> int:
        mask = self._mask
        if not mask:
            raise ValueError("min() of an empty CPUSet")
        return (mask & -mask).bit_length() - 1

    def max(self) -> int:
        if not self._mask:
            raise ValueError("max() of an empty CPUSet")
        return self._mask.bit_length() - 1

    # -- algebra ---------------------------------------------------------------
    # No complement of the other operand (~b is as long as b): a difference is
    # a ^ (a & b) and a subset test (a & b) == a, which a small set against a big
    # one keeps small.

    def union(self, *others: Iterable[int]) -> CPUSet:
        mask = self._mask
        for o in others:
            mask |= _mask(o)
        return CPUSet.of_mask(mask)

    def intersection(self, *others: Iterable[int]) -> CPUSet:
        mask = self._mask
        for o in others:
            mask &= _mask(o)
        return CPUSet.of_mask(mask)

    def difference(self, *others: Iterable[int]) -> CPUSet:
        mask = self._mask
        for o in others:
            mask ^= mask & _mask(o)
        return CPUSet.of_mask(mask)

    def symmetric_difference(self, other: Iterable[int]) -> CPUSet:
        return CPUSet.of_mask(self._mask ^ _mask(other))

    def issubset(self, other: Iterable[int]) -> bool:
        return self._mask & _mask(other) == self._mask

    def issuperset(self, other: Iterable[int]) -> bool:
        other_mask = _mask(other)
        return self._mask & other_mask == other_mask

    def isdisjoint(self, other: Iterable[int]) -> bool:
        return not self._mask & _mask(other)

    def __or__(self, other: object) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet.of_mask(self._mask | other._mask)

    def __and__(self, other: object) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet.of_mask(self._mask & other._mask)

    def __sub__(self, other: object) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet.of_mask(self._mask ^ (self._mask & other._mask))

    def __xor__(self, other: object) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet.of_mask(self._mask ^ other._mask)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._mask & other._mask == self._mask

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._mask != other._mask and self._mask & other._mask == self._mask

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._mask & other._mask == other._mask

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._mask != other._mask and self._mask & other._mask == other._mask


def _mask(cpus: Iterable[int]) -> int:
    if isinstance(cpus, CPUSet):
        return cpus._mask
    return CPUSet(cpus)._mask
