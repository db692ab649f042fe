"""The same picture as an SVG image, for a report or a bug ticket: plain string
building (no drawing library: the relay's install stays as it is). Packages are
boxes holding NUMA node boxes holding core boxes holding one square per thread,
coloured by who holds it: an exclusive holder, or the pool (each pool or balloon its
own colour, named in the legend; a balloon's hidden hyperthreads in its colour, hatched).
The node, the time and the relay's version are on the line under the title; the
container table (requests not met in red, and counted) and the pool table are below,
as text. Every line of text is wrapped or summarised to the picture's width.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from cri_resmgr.status.view import POOL_HEADERS, Cell, Cores, View
from cri_resmgr.topology.cpuset import CPUSet

# Exclusive holders: saturated, their names bold. Pools: light, each at least 18 CIE76 units
# from every other (tests/status checks it), so that no two read as the same one.
HOLDER_FILLS = ("#4fc3f7", "#ba68c8", "#7986cb", "#e57373", "#4db6ac", "#ffb74d")
POOL_FILLS = {"shared": "#b9e3a8", "reserved": "#fff176", "isolated": "#f8bbd0", "idle": "#eeeeee"}
# Other pools (balloons, the nodes of a pool tree) in the order the document names them.
OTHER_FILLS = ("#9fb4ff", "#ffc58f", "#7fd1d9", "#bcaaa4", "#b0b8d8", "#ff9e80", "#c9e27a", "#c7a0e8")
UNMET_FILL = "#c62828"  # a request not met: its table row and the count

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
    # Lines of free text: each on its own line, so none is drawn over another, and the
    # canvas as wide as the longest (estimated at CHAR a character).
    machine = [_package(PAD, 0, pkg, nodes, fills) for pkg, nodes in view.machine]
    tables = [_table(PAD, 0, view)[1]] + ([_columns(PAD, 0, _pool_rows(view))[1]] if view.pool_table else [])
    width = max([400.0] + [w + 2 * PAD for w, _, _ in machine] + [w + 2 * PAD for w in tables])
    wrap = max(MIN_WRAP, int((width - 2 * PAD) / CHAR))
    head = [(f"Policy {view.policy}" + (" (dry run)" if view.dry_run else "") +
             f", configuration from {view.source}", True, "")]
    if view.stamp:  # which node, when, which build (it goes into bug reports)
        head.append((view.stamp, False, "#455a64"))
    if view.reload:
        head.append((view.reload, False, ""))
    y = PAD
    for text, bold, fill in head:
        for line in _wrap(text, wrap):
            body.append(_text(PAD, y + 12, line, bold=bold, fill=fill))
            width, y = max(width, _right(PAD, line)), y + LINE
    y += PAD
    for (_, h, _), (pkg, nodes) in zip(machine, view.machine, strict=True):  # sized above, drawn at y now
        body += _package(PAD, y, pkg, nodes, fills)[2]
        y += h + PAD
    if not view.machine:
        text = "Machine not known to the relay (no policy has discovered it)"
        body.append(_text(PAD, y + 12, text))
        width, y = max(width, _right(PAD, text)), y + LINE
    if any(c.hidden for _, nodes in view.machine for _, cores in nodes for _, cells in cores for c in cells):
        body.insert(0, HATCH_DEF)
    legend, lw, lh = _legend(PAD, y, view, fills, max(width - 2 * PAD, MIN_WRAP * CHAR))
    body += legend
    width, y = max(width, lw + 2 * PAD), y + lh + PAD
    for line in pools_lines(view, wrap):
        body.append(_text(PAD, y + 12, line))
        width, y = max(width, _right(PAD, line)), y + LINE
    y += PAD
    table, tw, th = _table(PAD, y, view)
    body += table
    width, y = max(width, tw + 2 * PAD), y + th + PAD
    if view.unmet:
        for line in _wrap(view.unmet_line(), wrap):
            body.append(_text(PAD, y + 12, line, bold=True, fill=UNMET_FILL))
            width, y = max(width, _right(PAD, line)), y + LINE
        y += PAD
    if view.pool_table:
        table, tw, th = _columns(PAD, y, _pool_rows(view))
        body += table
        width, y = max(width, tw + 2 * PAD), y + th + PAD
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{y}" '
            f'viewBox="0 0 {width:.0f} {y}" font-family="monospace" font-size="12">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


MIN_WRAP = 100  # characters: the narrowest a line of text is wrapped to


def _pool_rows(view: View) -> list[Sequence[str]]:
    rows: list[Sequence[str]] = [POOL_HEADERS]
    rows += [(p.name, p.kind, p.parent, p.cpus, p.runs_on, p.mems, str(p.containers), p.requested)
             for p in view.pool_table]
    return rows


def _right(x: float, text: str) -> float:
    """The canvas width a line of text at `x` needs (its estimated end, and the padding)."""
    return x + len(text) * CHAR + PAD


def _wrap(text: str, width: int, sep: str = " ") -> list[str]:
    """`text` in lines of at most `width` characters, broken after `sep` where it can be
    (a word longer than a line is cut)."""
    lines: list[str] = []
    line = ""
    for word in text.split(sep):
        piece = word if not line else line + sep + word
        if len(piece) <= width:
            line = piece
            continue
        if line:
            lines.append(line + sep.rstrip())
        while len(word) > width:
            lines.append(word[:width])
            word = word[width:]
        line = word
    lines.append(line)
    return lines


def pools_lines(view: View, width: int) -> list[str]:
    """`Pools: ...` wrapped to `width` characters, a pool's CPUs summarised when they would
    take more than a line (`0-3,8,12-15,... (1000 CPUs)`): the text is for a look, the
    exact sets are in the pool table and the JSON."""
    entries = [f"{name} {_summary(cpus, width - len(name) - 1)}" for name, cpus in view.pools] or ["none"]
    text = "Pools: " + ", ".join(entries) + (f"; offline CPUs {view.offline}" if view.offline else "")
    return _wrap(text, width, ", ")


def _summary(cpus: str, room: int) -> str:
    if len(cpus) <= room or cpus == "-":
        return cpus
    count = len(CPUSet.parse(cpus))
    tail = f",... ({count} CPUs)"
    head = cpus[:max(0, room - len(tail))]
    return head[:head.rfind(",")] + tail if "," in head else f"({count} CPUs)"


def _legend(x: int, y: int, view: View, fills: dict[str, str], width: float) -> tuple[list[str], float, int]:
    """One swatch per pool and per exclusive holder seen on the machine, with its name,
    in rows of at most `width`."""
    seen: dict[str, str] = {}
    for _, nodes in view.machine:
        for _, cores in nodes:
            for _, cells in cores:
                for c in cells:
                    seen.setdefault(c.label, _fill(c, fills))
    hidden = any(c.hidden for _, nodes in view.machine for _, cores in nodes for _, cells in cores for c in cells)
    out, cx, cy, widest = [], float(x), y, 0.0
    items = [(label, fill) for label, fill in seen.items()] + ([(HIDDEN, "")] if hidden else [])
    for label, fill in items:
        step = 18 + (len(label) + 2) * CHAR
        if cx > x and cx - x + step > width:
            cx, cy = float(x), cy + LINE + 4
        if fill:
            out.append(_box(cx, cy, 14, 14, fill))
        else:  # the hatch the balloons' hidden threads wear over their colour
            out += [_box(cx, cy, 14, 14, "#ffffff"), _box(cx, cy, 14, 14, "url(#hidden)")]
        out.append(_text(cx + 18, cy + 12, label))
        cx += step
        widest = max(widest, cx - x)
    return out, widest, (cy - y + LINE if items else 0)


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
    # A CPU in several pools (static's shared/reserved) wears the narrower one's colour, so
    # that the legend's two entries do not look like one pool.
    return fills.get(cell.label, fills.get(cell.label.split("/")[-1], "#ffffff"))


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
    rows = [headers] + [(r.short, r.namespace, r.pod, r.name, r.qos, r.cpu_request, r.pool, r.exclusive_shown,
                         r.shared, r.mems, r.id) for r in view.containers]
    if len(rows) == 1:
        return [_text(x, y + 12, "No containers.")], 120, LINE
    return _columns(x, y, rows, {n + 1 for n, r in enumerate(view.containers) if r.unmet})


def _columns(x: int, y: int, rows: Sequence[Sequence[str]],
             marked: frozenset[int] | set[int] = frozenset()) -> tuple[list[str], float, int]:
    """A table as text, the first row bold, the `marked` rows (requests not met) in red."""
    widths = [max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        cx = float(x)
        for value, w in zip(row, widths, strict=True):
            out.append(_text(cx, y + 12 + n * LINE, value, bold=n == 0 or n in marked,
                             fill=UNMET_FILL if n in marked else ""))
            cx += w * CHAR
    return out, sum(widths) * CHAR, len(rows) * LINE


def _box(x: float, y: float, w: float, h: float, fill: str) -> str:
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="{fill}" stroke="#607d8b"/>'


def _text(x: float, y: float, text: str, bold: bool = False, fill: str = "") -> str:
    weight = ' font-weight="bold"' if bold else ""
    colour = f' fill="{fill}"' if fill else ""
    return f'<text x="{x:g}" y="{y}"{weight}{colour}>{escape(text)}</text>'


def _id(value: int | None) -> str:
    return "?" if value is None else str(value)

