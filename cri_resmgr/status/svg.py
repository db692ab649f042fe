"""The same picture as an SVG image, for a report or a bug ticket: plain string
building (no drawing library: the relay's install stays as it is). Packages are
boxes holding NUMA node boxes holding core boxes holding one square per thread,
coloured by who holds it: an exclusive holder, or the pool (each pool or balloon its
own colour, named in the legend; a balloon's hidden hyperthreads in its colour, hatched).
The node, the time and the relay's version are in the
top right corner; the container table and the pool table are below, as text.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from cri_resmgr.status.view import POOL_HEADERS, Cell, Cores, View

HOLDER_FILLS = ("#4fc3f7", "#ba68c8", "#7986cb", "#e57373", "#81c784", "#ffb74d")
POOL_FILLS = {"shared": "#c8e6c9", "reserved": "#fff59d", "isolated": "#f8bbd0", "idle": "#eeeeee"}
# Other pools (balloons, the nodes of a pool tree) in the order the document names them.
OTHER_FILLS = ("#b2dfdb", "#d1c4e9", "#ffccbc", "#dcedc8", "#b3e5fc", "#f0f4c3", "#ffe0b2", "#cfd8dc")

THREAD_W, THREAD_H = 120, 34  # one thread's square
PAD, TITLE = 8, 18  # inside a box: padding, and the height of its title line
CORES_PER_ROW = 8
LINE = 16  # a text line
CHAR = 7.2  # width of a monospace character at 12px, for the table's columns
# Over the balloon's colour: a thread the balloon owns but its containers do not run on
# (HideHyperthreads' sibling threads).
HATCH_DEF = ('<defs><pattern id="hidden" width="8" height="8" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="8" height="8" fill="white" fill-opacity="0.45"/>'
             '<line x1="0" y1="0" x2="0" y2="8" stroke="#607d8b" stroke-width="2"/></pattern></defs>')
HIDDEN = "hidden hyperthread"


def pool_fills(view: View) -> dict[str, str]:
    """A colour for every pool a CPU can be marked with: the fixed ones, then the others in turn."""
    fills = dict(POOL_FILLS)
    others = [name for name, _ in view.pools if name not in fills and name != "exclusive"]
    others += sorted({c.label for _, nodes in view.machine for _, cores in nodes for _, cells in cores
                      for c in cells if c.holder is None and c.label.split("/")[0] not in fills} - set(others))
    for i, name in enumerate(others):
        fills[name] = OTHER_FILLS[i % len(OTHER_FILLS)]
    return fills


def render(view: View) -> str:
    body: list[str] = []
    fills = pool_fills(view)
    y = PAD
    body.append(_text(PAD, y + 12, f"Policy {view.policy}" + (" (dry run)" if view.dry_run else "") +
                      f", configuration from {view.source}", bold=True))
    y += LINE
    if view.reload:
        body.append(_text(PAD, y + 12, view.reload))
        y += LINE
    y += PAD
    width = 400.0
    for pkg, nodes in view.machine:
        w, h, inner = _package(PAD, y, pkg, nodes, fills)
        body += inner
        width, y = max(width, w + 2 * PAD), y + h + PAD
    if not view.machine:
        body.append(_text(PAD, y + 12, "Machine not known to the relay (no policy has discovered it)"))
        y += LINE
    if any(c.hidden for _, nodes in view.machine for _, cores in nodes for _, cells in cores for c in cells):
        body.insert(0, HATCH_DEF)
    legend, lw, lh = _legend(PAD, y, view, fills)
    body += legend
    width, y = max(width, lw + 2 * PAD), y + lh + PAD
    pools = ", ".join(f"{name} {cpus}" for name, cpus in view.pools) or "none"
    body.append(_text(PAD, y + 12, f"Pools: {pools}" + (f"; offline CPUs {view.offline}" if view.offline else "")))
    y += LINE + PAD
    table, tw, th = _table(PAD, y, view)
    body += table
    width, y = max(width, tw + 2 * PAD), y + th + PAD
    if view.pool_table:
        rows = [POOL_HEADERS] + [(p.name, p.kind, p.parent, p.cpus, p.runs_on, p.mems, str(p.containers), p.requested)
                                 for p in view.pool_table]
        table, tw, th = _columns(PAD, y, rows)
        body += table
        width, y = max(width, tw + 2 * PAD), y + th + PAD
    if view.stamp:  # top right: which node, when, which build (it goes into bug reports)
        width = max(width, len(view.stamp) * CHAR + 2 * PAD + 300)
        body.append(f'<text x="{width - PAD:g}" y="{PAD + 12}" text-anchor="end" fill="#455a64">'
                    f'{escape(view.stamp)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{y}" '
            f'viewBox="0 0 {width:.0f} {y}" font-family="monospace" font-size="12">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def _legend(x: int, y: int, view: View, fills: dict[str, str]) -> tuple[list[str], float, int]:
    """One swatch per pool and per exclusive holder seen on the machine, with its name."""
    seen: dict[str, str] = {}
    for _, nodes in view.machine:
        for _, cores in nodes:
            for _, cells in cores:
                for c in cells:
                    seen.setdefault(c.label, _fill(c, fills))
    hidden = any(c.hidden for _, nodes in view.machine for _, cores in nodes for _, cells in cores for c in cells)
    out, cx = [], float(x)
    for label, fill in seen.items():
        out += [_box(cx, y, 14, 14, fill), _text(cx + 18, y + 12, label)]
        cx += 18 + (len(label) + 2) * CHAR
    if hidden:  # the hatch the balloons' hidden threads wear over their colour
        out += [_box(cx, y, 14, 14, "#ffffff"), _box(cx, y, 14, 14, "url(#hidden)"), _text(cx + 18, y + 12, HIDDEN)]
        cx += 18 + (len(HIDDEN) + 2) * CHAR
    return out, cx - x, (LINE if seen else 0)


def _package(x: int, y: int, pkg: int | None, nodes: tuple[tuple[int, Cores], ...],
             fills: dict[str, str]) -> tuple[int, int, list[str]]:
    """(width, height, elements) of one package box at (x, y)."""
    out: list[str] = []
    cy, width = y + TITLE + PAD, 0
    for node, cores in nodes:
        w, h, inner = _node(x + PAD, cy, node, cores, fills)
        out += inner
        width, cy = max(width, w), cy + h + PAD
    width += 2 * PAD
    head = [_box(x, y, width, cy - y, "#fafafa"), _text(x + PAD, y + 14, f"Package {_id(pkg)}", bold=True)]
    return width, cy - y, head + out


def _node(x: int, y: int, node: int, cores: Cores, fills: dict[str, str]) -> tuple[int, int, list[str]]:
    out: list[str] = []
    threads = max((len(cells) for _, cells in cores), default=1)
    core_w, core_h = threads * THREAD_W + (threads + 1) * PAD, TITLE + THREAD_H + 2 * PAD
    for i, (core, cells) in enumerate(cores):
        cx = x + PAD + (i % CORES_PER_ROW) * (core_w + PAD)
        cy = y + TITLE + PAD + (i // CORES_PER_ROW) * (core_h + PAD)
        out.append(_box(cx, cy, core_w, core_h, "#ffffff"))
        out.append(_text(cx + PAD, cy + 14, f"Core {_id(core)}"))
        for j, cell in enumerate(cells):
            out += _thread(cx + PAD + j * (THREAD_W + PAD), cy + TITLE + PAD, cell, fills)
    per_row = min(len(cores), CORES_PER_ROW) or 1
    rows = -(-len(cores) // CORES_PER_ROW) or 1
    width = per_row * (core_w + PAD) + PAD
    height = TITLE + PAD + rows * (core_h + PAD)
    return width, height, [_box(x, y, width, height, "#f0f4f8"),
                           _text(x + PAD, y + 14, f"NUMA node {node}", bold=True)] + out


def _fill(cell: Cell, fills: dict[str, str]) -> str:
    if cell.holder is not None:
        return HOLDER_FILLS[cell.holder % len(HOLDER_FILLS)]
    return fills.get(cell.label, fills.get(cell.label.split("/")[0], "#ffffff"))


def _thread(x: int, y: int, cell: Cell, fills: dict[str, str]) -> list[str]:
    fill = _fill(cell, fills)
    label = cell.label if len(cell.label) <= 16 else cell.label[:15] + "…"
    title = f"CPU {cell.cpu}: {cell.label}" + (f"; shared by {', '.join(cell.sharers)}" if cell.sharers else "")
    if cell.hidden:
        title += f"; {HIDDEN}: the balloon's, its containers do not run on it"
    # The containers running on it shared (a pool tree's nodes, a balloon): their count, named in the title.
    shared = [f'<text x="{x + THREAD_W - 4:g}" y="{y + 13}" text-anchor="end" fill="#37474f">'
              f'+{len(cell.sharers)}</text>'] if cell.sharers else []
    return [f'<g><title>{escape(title)}</title>',
            _box(x, y, THREAD_W, THREAD_H, fill),
            *([_box(x, y, THREAD_W, THREAD_H, "url(#hidden)")] if cell.hidden else []),
            _text(x + 4, y + 13, f"CPU {cell.cpu}"), *shared, _text(x + 4, y + 28, label, bold=cell.holder is not None),
            "</g>"]


def _table(x: int, y: int, view: View) -> tuple[list[str], float, int]:
    headers = ("CONTAINER", "NAMESPACE", "POD", "NAME", "QOS", "CPU", "POOL", "EXCLUSIVE", "SHARED", "MEMS", "ID")
    rows = [headers] + [(r.short, r.namespace, r.pod, r.name, r.qos, r.cpu_request, r.pool, r.exclusive, r.shared,
                         r.mems, r.id) for r in view.containers]
    if len(rows) == 1:
        return [_text(x, y + 12, "No containers.")], 120, LINE
    return _columns(x, y, rows)


def _columns(x: int, y: int, rows: Sequence[Sequence[str]]) -> tuple[list[str], float, int]:
    """A table as text, the first row bold."""
    widths = [max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        cx = float(x)
        for value, w in zip(row, widths, strict=True):
            out.append(_text(cx, y + 12 + n * LINE, value, bold=n == 0))
            cx += w * CHAR
    return out, sum(widths) * CHAR, len(rows) * LINE


def _box(x: float, y: float, w: float, h: float, fill: str) -> str:
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="{fill}" stroke="#607d8b"/>'


def _text(x: float, y: float, text: str, bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    return f'<text x="{x:g}" y="{y}"{weight}>{escape(text)}</text>'


def _id(value: int | None) -> str:
    return "?" if value is None else str(value)

