"""The terminal picture: packages > NUMA nodes > cores > threads, each thread with
who holds it, then the pools and a table of containers. ANSI colour only when asked
(the command asks on a TTY without NO_COLOR); the words carry the meaning either way.
"""

from __future__ import annotations

from collections.abc import Sequence

from cri_resmgr.status.view import POOL_HEADERS, Cell, PoolRow, Row, View

# Exclusive holders cycle through these (SGR codes); pools have fixed ones.
HOLDER_COLOURS = ("1;36", "1;35", "1;34", "1;31", "1;32", "1;33")
POOL_COLOURS = {"shared": "32", "reserved": "33", "isolated": "35", "idle": "2"}
UNMET_COLOUR = "1;31"  # a request not met

HEADERS = ("CONTAINER", "NAMESPACE", "POD", "NAME", "QOS", "CPU", "POOL", "EXCLUSIVE", "SHARED", "MEMS", "ID")
CLASS_HEADERS = ("BLOCKIO", "RDT")


def render(view: View, colour: bool = False) -> str:
    lines = [f"Policy {view.policy}" + (" (dry run: decided, not applied)" if view.dry_run else "") +
             f", configuration from {view.source}"]
    if view.stamp:
        lines.append(f"({view.stamp})")
    if view.reload:
        lines.append(view.reload)
    if not view.machine:
        lines.append("Machine: not known to the relay (no policy has discovered it)")
    for pkg, nodes in view.machine:
        lines.append(f"Package {_id(pkg)}")
        for node, cores in nodes:
            lines.append(f"  NUMA node {node}")
            for core, cells in cores:
                threads = "  ".join(f"CPU {c.cpu} {_paint(c.label, _colour(c), colour)}" +
                                    (" (hidden)" if c.hidden else "") for c in cells)
                lines.append(f"    Core {_id(core)}: {threads}")
    if view.offline:
        lines.append(f"Offline CPUs: {view.offline}")
    lines.append("Pools: " + (", ".join(f"{name} {cpus}" for name, cpus in view.pools) or "none (policy none)"))
    if view.cpu_classes:
        lines.append(view.cpu_classes)
    lines += view.cpu_class_failures
    if view.pool_table:
        lines.append("")
        lines += _pool_lines(view.pool_table)
    lines.append("")
    lines += _table(view.containers, colour) if view.containers else ["No containers."]
    if view.unmet:
        lines += ["", _paint(view.unmet_line(), UNMET_COLOUR, colour)]
    if view.warnings:
        lines += ["", "Warnings:"] + [f"  {w}" for w in view.warnings]
    return "\n".join(lines)


def _table(rows: Sequence[Row], colour: bool) -> list[str]:
    cells: list[tuple[str, ...]] = [HEADERS]
    cells += [(r.short, r.namespace, r.pod, r.name, r.qos, r.cpu_request, r.pool, r.exclusive_shown, r.shared, r.mems,
               r.id) for r in rows]
    if any(r.blockio != "-" or r.rdt != "-" for r in rows):  # block I/O and RDT classes, when any is given
        cells = [(*cells[0][:-1], *CLASS_HEADERS, cells[0][-1])] + \
            [(*row[:-1], r.blockio, r.rdt, row[-1]) for row, r in zip(cells[1:], rows, strict=True)]
    if any(r.sched != "-" for r in rows):  # scheduling classes, when any is given
        cells = [(*cells[0][:-1], "SCHED", cells[0][-1])] + \
            [(*row[:-1], r.sched, row[-1]) for row, r in zip(cells[1:], rows, strict=True)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    out = []
    for n, row in enumerate(cells):
        text = "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        if n > 0 and rows[n - 1].exclusive != "-":
            first = row[0]  # the short name carries its holder's colour, as on its CPUs
            text = _paint(first, HOLDER_COLOURS[(n - 1) % len(HOLDER_COLOURS)], colour) + text[len(first):]
        out.append(text)
    return out


def _pool_lines(pools: Sequence[PoolRow]) -> list[str]:
    cells = [POOL_HEADERS] + [(p.name, p.kind, p.parent, p.cpus, p.runs_on, p.mems, str(p.containers), p.requested)
                              for p in pools]
    widths = [max(len(row[i]) for row in cells) for i in range(len(POOL_HEADERS))]
    return ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def _colour(cell: Cell) -> str:
    if cell.holder is not None:
        return HOLDER_COLOURS[cell.holder % len(HOLDER_COLOURS)]
    return POOL_COLOURS.get(cell.label.split("/")[0], "")


def _paint(text: str, sgr: str, colour: bool) -> str:
    return f"\x1b[{sgr}m{text}\x1b[0m" if colour and sgr else text


def _id(value: int | None) -> str:
    return "?" if value is None else str(value)
