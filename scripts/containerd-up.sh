#!/usr/bin/env bash
# Starts a throwaway containerd with everything under DIR (config, root, state,
# socket DIR/containerd.sock, runc root, logs, pid file) and imports the locally
# built busybox and pause images. Never touches the machine's own containerd.
#
#   scripts/containerd-up.sh DIR [--cgroup-root /crirm-xyz]... [--snapshotter native] [-nri]
#
# Prints the socket path. -nri (or --nri): containerd 2.1.9 from /var/cache/cri-resmgr-test
# (`make deps` puts it there) with NRI on, its NRI socket DIR/nri.sock printed on a second
# line, for cri-resmgr-nri -nri-socket. Stop it with scripts/containerd-down.sh DIR.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
[ -x "$python" ] || { echo "containerd-up: $python missing; run 'make deps' (or set PYTHON)" >&2; exit 1; }
[ $# -ge 1 ] || { echo "usage: $0 DIR [--cgroup-root PATH]... [--snapshotter NAME] [--timeout SECONDS] [-nri]" >&2; exit 2; }
dir=$1; shift
PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} exec "$python" -m tests.harness.containerd up "$dir" "$@"
