"""The resctrl groups of the RDT classes under `<host-root>/sys/fs/resctrl`: what the
hardware offers (`info/`), one group per class with its whole schemata written in one
write, tasks moved into a group's `tasks` one thread per write (as the kernel takes
them), and the groups no class uses any more removed. Only groups named with our
prefix are ever touched: other tools' groups are left alone."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable, Mapping

from cri_resmgr.classes.hostfs import HostFiles
from cri_resmgr.classes.rdtplan import CacheInfo, MbInfo, ResctrlInfo

RESCTRL = "sys/fs/resctrl"
PREFIX = "cri-resmgr."  # our groups: PREFIX + class name
_NOT_GROUPS = ("info", "mon_groups", "mon_data")


def group_dir(cls: str | None) -> str:
    """A class's group (None: the root group, where tasks of no class live)."""
    return f"{RESCTRL}/{PREFIX}{cls}" if cls else RESCTRL


class ResctrlWriter:
    """`note` hears every write, for the dump."""

    def __init__(self, files: HostFiles, note: Callable[[str], None] | None = None):
        self._files = files
        self._note = note

    @property
    def mounted(self) -> bool:
        return self._files.exists(f"{RESCTRL}/info") and self._files.exists(f"{RESCTRL}/schemata")

    def where(self) -> str:
        return self._files.show(RESCTRL)

    def info(self) -> ResctrlInfo:
        """What the hardware offers, from info/ and the root group's schemata."""
        schemata = self._files.read(f"{RESCTRL}/schemata") or ""
        ids = _schemata_ids(schemata)
        l3 = None
        kinds = tuple(k for k in ("L3", "L3CODE", "L3DATA") if self._files.exists(f"{RESCTRL}/info/{k}"))
        if kinds:
            kinds = ("L3",) if "L3" in kinds else tuple(k for k in kinds if k != "L3")
            base = f"{RESCTRL}/info/{kinds[0]}"
            l3 = CacheInfo(cbm_mask=int(self._value(f"{base}/cbm_mask"), 16),
                           min_cbm_bits=int(self._value(f"{base}/min_cbm_bits")),
                           num_closids=int(self._value(f"{base}/num_closids")),
                           ids=ids.get(kinds[0], (0,)), kinds=kinds)
        mb = None
        if self._files.exists(f"{RESCTRL}/info/MB"):
            base = f"{RESCTRL}/info/MB"
            mounts = self._files.read("proc/mounts") or ""
            mbps = any("resctrl" in line and "mba_MBps" in line for line in mounts.splitlines())
            mb = MbInfo(min_bandwidth=int(self._value(f"{base}/min_bandwidth")),
                        bandwidth_gran=int(self._value(f"{base}/bandwidth_gran")),
                        num_closids=int(self._value(f"{base}/num_closids")), ids=ids.get("MB", (0,)), mbps=mbps)
        return ResctrlInfo(l3=l3, mb=mb, other_groups=len(self.other_groups()))

    def _value(self, rel: str) -> str:
        text = self._files.read(rel)
        if text is None or not text.strip():
            raise OSError(errno.ENOENT, f"{self._files.show(rel)} is missing or empty")
        return text.strip()

    def other_groups(self) -> list[str]:
        """Control groups that are not ours (another tool's, a runtime's)."""
        return [n for n in self._files.listdir(RESCTRL) if not n.startswith(PREFIX) and n not in _NOT_GROUPS
                and self._files.exists(f"{RESCTRL}/{n}/schemata")]

    def groups(self) -> list[str]:
        """The classes whose groups exist (ours only)."""
        return [n[len(PREFIX):] for n in self._files.listdir(RESCTRL) if n.startswith(PREFIX)]

    def apply(self, schemata: Mapping[str, str]) -> list[str]:
        """Creates and configures a group per class, removes our groups no class uses;
        returns what was done. Raises OSError (the kernel refusing a schemata says why)."""
        done = []
        for cls in self.groups():
            if cls not in schemata:
                self._files.rmdir(group_dir(cls))  # the kernel moves its tasks to the root group
                done.append(f"removed {group_dir(cls)}")
                self._noted(f"rdt: removed group {self._files.show(group_dir(cls))}")
        for cls, text in schemata.items():
            d = group_dir(cls)
            if not self._files.exists(d):
                self._files.mkdir(d)
                done.append(f"created {d}")
            if text:
                self._files.write(f"{d}/schemata", text)  # the whole schemata in one write
                done.append(f"{d}/schemata: {text.strip()!r}")
                self._noted(f"rdt: wrote {text.strip()!r} to {self._files.show(d + '/schemata')}")
        return done

    def tasks(self, cls: str | None) -> set[int]:
        text = self._files.read(f"{group_dir(cls)}/tasks") or ""
        return {int(t) for t in text.split() if t.isdigit()}

    def move(self, cls: str | None, tids: Iterable[int], who: str = "") -> int:
        """Moves the threads not yet in the class's group there; returns how many moved.
        A thread that has exited meanwhile is skipped; other errors raise OSError."""
        have = self.tasks(cls)
        moved = 0
        path = f"{group_dir(cls)}/tasks"
        for tid in tids:
            if tid in have:
                continue
            try:
                self._files.write(path, str(tid))
            except ProcessLookupError:
                continue
            except OSError as e:
                if e.errno in (errno.ESRCH, errno.EINVAL):  # gone (the kernel says one or the other)
                    continue
                raise
            moved += 1
        if moved:
            self._noted(f"rdt {who}: moved {moved} tasks to {self._files.show(path)}")
        return moved

    def release(self, tids: Iterable[int], who: str = "") -> int:
        """Moves those of `tids` that are in one of our groups back to the root group (a
        container that lost its class); threads in other tools' groups stay there."""
        ours = set()
        wanted = set(tids)
        for cls in self.groups():
            ours |= self.tasks(cls) & wanted
        return self.move(None, sorted(ours), who) if ours else 0

    def _noted(self, text: str) -> None:
        if self._note is not None:
            self._note(text)


def _schemata_ids(text: str) -> dict[str, tuple[int, ...]]:
    """Resource -> its domain ids, from a schemata ("L3:0=fff;1=fff", "MB:0=100;1=100")."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.strip().partition(":")
        ids = []
        for item in rest.split(";"):
            i, _, _ = item.partition("=")
            if i.strip().isdigit():
                ids.append(int(i))
        if name and ids:
            out[name] = tuple(sorted(ids))
    return out
