"""Benchmark of the admission webhook: reviews per second and latency at 16
concurrent clients, over verified TLS with kept-alive HTTP/1.1 connections.

The webhook runs as its own process (as deployed), with certificates from
scripts/webhook-certs.sh; the clients are threads of this process, each
with one connection. Bounded in count and time; loopback only.

    python -m tests.bench.webhook [--clients 16] [--reviews 4000]
"""
from __future__ import annotations

import argparse
import http.client
import json
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CERTS_SCRIPT = REPO / "scripts" / "webhook-certs.sh"
SERVICE_HOST = "cri-resmgr-webhook.cri-resmgr.svc"
START_TIMEOUT = 30.0


class _ServiceConnection(http.client.HTTPSConnection):
    """Loopback connection verified against the Service name."""

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self._context.wrap_socket(sock, server_hostname=SERVICE_HOST)


def sample_review(uid: str) -> bytes:
    """A typical review: a pod with an init container and two containers."""
    def container(name: str, cpu: str, memory: str) -> dict:
        return {"name": name, "image": "registry.example/app:1.0",
                "resources": {"requests": {"cpu": cpu, "memory": memory},
                              "limits": {"cpu": cpu, "memory": memory}}}

    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-7d4b9c-", "namespace": "default",
                     "labels": {"app": "web"}, "annotations": {"prometheus.io/scrape": "true"}},
        "spec": {"initContainers": [container("init", "100m", "32Mi")],
                 "containers": [container("app", "2", "1Gi"), container("sidecar", "250m", "64Mi")]},
    }
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": uid, "kind": kind, "resource": {"group": "", "version": "v1", "resource": "pods"},
                          "namespace": "default", "operation": "CREATE", "object": pod}}
    return json.dumps(review).encode()


def _start_webhook(workdir: Path) -> tuple[subprocess.Popen, int, Path]:
    subprocess.run(["bash", str(CERTS_SCRIPT), "--dry-run", "--output-dir", str(workdir)],
                   check=True, capture_output=True)
    log = workdir / "webhook.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cri_resmgr_webhook", "-cert-file", str(workdir / "tls.crt"),
             "-key-file", str(workdir / "tls.key"), "-bind-address", "127.0.0.1", "-port", "0"],
            stdout=subprocess.DEVNULL, stderr=log_file)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        match = re.search(r"listening on https://127\.0\.0\.1:(\d+)", log.read_text())
        if match:
            return proc, int(match.group(1)), log
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"webhook did not start: {log.read_text()}")


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def run(clients: int = 16, reviews: int = 4000, max_seconds: float = 120.0) -> dict[str, Any]:
    """Sends `reviews` AdmissionReviews from `clients` concurrent kept-alive
    TLS connections (stopping early after max_seconds); returns the figures."""
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        workdir = Path(tmp)
        proc, port, log = _start_webhook(workdir)
        try:
            context = ssl.create_default_context(cafile=str(workdir / "ca.crt"))
            result = _load(port, context, clients, reviews, max_seconds)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        result["logged_reviews"] = sum(1 for line in log.read_text().splitlines() if " review " in line)
    return result


def _load(port: int, context: ssl.SSLContext, clients: int, reviews: int, max_seconds: float) -> dict[str, Any]:
    lock = threading.Lock()
    issued = 0
    latencies: list[float] = []
    errors: list[str] = []
    ready = threading.Barrier(clients + 1)
    deadline_box: list[float] = []

    def client(n: int) -> None:
        nonlocal issued
        conn = _ServiceConnection("127.0.0.1", port, context=context, timeout=30)
        try:
            conn.connect()  # the handshake is not part of a review's latency
        except OSError as err:
            errors.append(f"client {n}: {err}")
        ready.wait()
        mine: list[float] = []
        while conn.sock is not None:
            with lock:
                if issued >= reviews or time.monotonic() > deadline_box[0]:
                    break
                issued += 1
                uid = f"bench-{issued}"
            body = sample_review(uid)
            start = time.perf_counter()
            try:
                conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
                elapsed = time.perf_counter() - start
                if response.status != 200 or f'"uid":"{uid}"'.encode() not in data or b'"patch"' not in data:
                    errors.append(f"{uid}: HTTP {response.status} {data[:200]!r}")
                else:
                    mine.append(elapsed)
            except (OSError, http.client.HTTPException) as err:
                errors.append(f"{uid}: {err!r}")
                break
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    deadline_box.append(time.monotonic() + max_seconds)
    ready.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    latencies.sort()
    return {
        "clients": clients,
        "reviews": len(latencies),
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "seconds": round(seconds, 3),
        "reviews_per_s": round(len(latencies) / seconds, 1) if seconds > 0 else 0.0,
        "p50_ms": round(_percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(_percentile(latencies, 0.99) * 1000, 2),
        "max_ms": round(latencies[-1] * 1000, 2) if latencies else float("nan"),
    }


def format_table(result: dict[str, Any]) -> str:
    rows = [("clients", result["clients"]), ("reviews", result["reviews"]), ("errors", result["errors"]),
            ("seconds", result["seconds"]), ("reviews/s", result["reviews_per_s"]),
            ("p50 latency (ms)", result["p50_ms"]), ("p99 latency (ms)", result["p99_ms"]),
            ("max latency (ms)", result["max_ms"])]
    width = max(len(name) for name, _ in rows)
    lines = ["webhook benchmark (TLS, keep-alive, webhook in its own process)"]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    if result["first_error"]:
        lines.append(f"  first error: {result['first_error']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_webhook", description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--reviews", type=int, default=4000)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    result = run(args.clients, args.reviews, args.max_seconds)
    print(format_table(result))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
