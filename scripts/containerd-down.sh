#!/usr/bin/env bash
# Stops the throwaway containerd under DIR and removes every trace of it: the
# daemon (by its pid file), its containers (runc on DIR's runc root), shims whose
# command line names DIR/containerd.sock, mounts under DIR (innermost first),
# the cgroup roots it was started with, and DIR itself.
#
#   scripts/containerd-down.sh DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
[ -x "$python" ] || { echo "containerd-down: $python missing; run 'make deps' (or set PYTHON)" >&2; exit 1; }
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} exec "$python" -m tests.harness.containerd down "$1"
