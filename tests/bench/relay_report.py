"""The relay bench's tables (tests.bench.relay): plain text, one per measurement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["format_table", "format_result", "format_floor", "format_targets"]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    """A plain text table: the first `left` columns left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=False))).rstrip()

    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def format_result(result: dict[str, Any]) -> str:
    out = [f"relay vs direct containerd ({result['cpus']} CPUs shared by client, relay and containerd; "
           f"relay with -policy null, -relay-transport {result.get('transport', 'h2')})", ""]
    if "loadavg_start" in result:
        out[-1:-1] = [f"load average (1, 5, 15 min): {result['loadavg_start']} at the start, "
                      f"{result.get('loadavg_end')} at the end"]
    rows = []
    for method, m in result["latency"].items():
        d, r, p = m["direct"], m["relay"], m.get("pipe", {})
        rows.append([method, d["n"], d["p50_us"], r["p50_us"], p.get("p50_us", ""), m["added_p50_us"],
                     m["ratio_p50"], m.get("pipe_ratio_p50", ""), m.get("relay_pipe_ratio_p50", ""),
                     d["p99_us"], r["p99_us"], m["ratio_p99"], r["cpu_us_per_call"], p.get("cpu_us_per_call", "")])
    out.append(f"latency, 1 caller (us); ListContainers lists {result['containers']} containers; pipe: a bare "
               "byte pipe between the sockets (tests.bench.pipe), the floor")
    out.append(format_table(["method", "n", "direct p50", "relay p50", "pipe p50", "added p50", "relay/direct",
                             "pipe/direct", "relay/pipe", "direct p99", "relay p99", "ratio p99", "relay cpu/call",
                             "pipe cpu/call"], rows))
    rows = []
    for method, m in result["latency"].items():
        if "static" in m:
            r, st = m["relay"], m["static"]
            rows.append([method, r["p50_us"], st["p50_us"], m["static_ratio_p50"], r["p99_us"], st["p99_us"],
                         r["cpu_us_per_call"], st["cpu_us_per_call"]])
    if rows:
        out += ["", "a policy active (static: ListContainers and ContainerStatus replies read for crash "
                    "detection) against the passthrough relay, 1 caller (us)"]
        out.append(format_table(["method", "passthrough p50", "static p50", "static/passthrough", "passthrough p99",
                                 "static p99", "cpu/call pass", "cpu/call static"], rows))
    rows = []
    for method, m in result["latency"].items():
        off, on = m["relay"], m["metrics"]
        rows.append([method, off["p50_us"] - m["direct"]["p50_us"], on["p50_us"] - m["direct"]["p50_us"],
                     m["metrics_added_p50_us"], off["p99_us"], on["p99_us"], off["cpu_us_per_call"],
                     on["cpu_us_per_call"]])
    out += ["", "the relay's added latency with metrics off and on (-metrics-address, calls timed, "
                "/metrics scraped every second), 1 caller (us)"]
    out.append(format_table(["method", "added p50 off", "added p50 on", "on - off p50", "p99 off", "p99 on",
                             "cpu/call off", "cpu/call on"], rows))
    rows = []
    for method, cells in result["throughput"].items():
        for n, m in cells.items():
            st, p = m.get("static", {}), m.get("pipe", {})
            rows.append([method, n, m["direct"]["calls_per_s"], m["relay"]["calls_per_s"], p.get("calls_per_s", ""),
                         m["ratio"], m.get("pipe_ratio", ""), m.get("relay_pipe_ratio", ""),
                         m["relay"]["cpu_us_per_call"], p.get("cpu_us_per_call", ""), m["direct"]["cpu_us_per_call"],
                         st.get("calls_per_s", ""), m.get("static_ratio", ""), st.get("cpu_us_per_call", "")])
    out += ["", f"throughput (calls/s, {result['seconds_per_cell']:g} s per target and cell; static: the relay "
                "with the static policy, at the most callers only; cpu/call in us)"]
    out.append(format_table(["method", "callers", "direct", "relay", "pipe", "relay/direct", "pipe/direct",
                             "relay/pipe", "relay cpu", "pipe cpu", "containerd cpu", "static", "static/relay",
                             "static cpu"], rows))
    floor = format_floor(result)
    if floor:
        out += ["", "issue 17's relay/direct targets beside the bare pipe's figures of the same run", floor]
    c = result["create"]
    rows = [[name, c[name]["n"], c[name]["p50_us"], c[name]["p99_us"], c[name]["max_us"], c[name]["cpu_us_per_call"],
             c[name].get("cpu_us_per_call_all", "") if name != "direct" else ""]
            for name in ("direct", "passthrough", "intercepted")]
    out += ["", "CreateContainer of best-effort containers (us); cpu/call is containerd's for direct, "
                "the relay's otherwise, during its own blocks; cpu/call all: the relay's CPU over the whole "
                "phase (deferred state saves included) per create"]
    out.append(format_table(["path", "n", "p50", "p99", "max", "cpu/call", "cpu/call all"], rows))
    out.append(f"intercepted (static) - passthrough: p50 {c['added_p50_us']:+} us, p99 {c['added_p99_us']:+} us")
    mem = result["memory"]
    out += ["", format_table(["relay memory (MiB)", "VmRSS", "VmHWM"],
                             [[name, v["VmRSS_mib"], v["VmHWM_mib"]] for name, v in mem.items()])]
    out += ["", format_targets(result["targets"])]
    return "\n".join(out)


def format_floor(result: dict[str, Any]) -> str:
    """relay/direct, pipe/direct and relay/pipe of each method: p50 at 1 caller, calls/s at the most."""
    most = str(max(int(n) for n in result["callers"]))
    rows = []
    for method, m in result["latency"].items():
        t = result["throughput"].get(method, {}).get(most, {})
        if "pipe" not in m or "pipe" not in t:
            continue
        rows.append([method, m["ratio_p50"], m["pipe_ratio_p50"], m["relay_pipe_ratio_p50"],
                     t["ratio"], t["pipe_ratio"], t["relay_pipe_ratio"]])
    if not rows:
        return ""
    return format_table(["method", "p50 relay/direct", "pipe/direct", "relay/pipe", f"calls/s at {most} relay/direct",
                         "pipe/direct", "relay/pipe"], rows)


def format_targets(targets: Sequence[dict[str, Any]]) -> str:
    rows = [[t["target"], t["value"], ("<= " if t["kind"] == "max" else ">= ") + _cell(t["limit"]), t["verdict"]]
            for t in targets]
    return format_table(["target", "measured", "limit", "verdict"], rows)


