#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks: Debian packages (as root), a virtualenv and
# the project itself. Idempotent: it only installs what is missing.
#   scripts/install-deps.sh        everything `make test`, `make lint` and `make bench` use
#   scripts/install-deps.sh demo   only what `make demo` runs: containerd, runc, busybox and
#                                  the relay's own run-time packages (no Go toolchain, mypy,
#                                  ruff, kubernetes client or newer containerd releases)
#   scripts/install-deps.sh vm     only the Debian packages `make test-vm` adds (docs/vm.md):
#                                  qemu, mmdebstrap and the image build's tools
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
mode=${1:-all}
case $mode in
  all|demo|vm) ;;
  *) echo "install-deps: unknown mode '$mode' (all, demo or vm)" >&2; exit 2 ;;
esac

# python3-venv: a minimal Debian's python3 has no ensurepip, so `python3 -m venv` fails
# without it (also for scripts/install-node.sh); make: the README's commands.
# golang-go, golang-github-containerd-ttrpc-dev, gogoprotobuf: tests/nri/interop builds a Go
# runtime side on the real containerd/ttrpc library (with CI=true those tests fail, not skip,
# when they are missing).
DEMO_APT_PACKAGES=(python3-venv make containerd runc busybox-static util-linux procps)
APT_PACKAGES=("${DEMO_APT_PACKAGES[@]}" openssl iproute2 golang-go golang-github-containerd-ttrpc-dev gogoprotobuf)
[ "$mode" = demo ] && APT_PACKAGES=("${DEMO_APT_PACKAGES[@]}")
# The VM suite: qemu (TCG) boots the guest; mmdebstrap, e2fsprogs (mkfs.ext4 -d), xz-utils
# (the kernel's vmlinux) and busybox-static (its initramfs) build it (scripts/vm/build-image.sh).
[ "$mode" = vm ] && APT_PACKAGES=(qemu-system-x86 mmdebstrap e2fsprogs xz-utils busybox-static python3-venv)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})) && [ "$mode" = vm ]; then
  # Not fatal here: `make test-vm` then says what is missing, and skips (fails under CI=true).
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: the VM suite needs ${missing[*]}; run as root to install them" >&2
  else
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
      echo "install-deps: could not install ${missing[*]}" >&2
  fi
  exit 0
fi
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing Debian packages (${missing[*]}); run as root" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# containerd 1.7.24 and 2.1.9 for the NRI and relay tests: Debian's packages, unpacked
# into /var/cache/cri-resmgr-test (nothing installed; scripts/fetch-runtimes.sh). Without
# them those tests skip, and fail under CI=true.
[ "$mode" = vm ] && exit 0  # `make deps` made the venv; the image build fetches containerd 2.1.9
if [ "$mode" = all ] && [ "$(id -u)" = 0 ]; then
  bash scripts/fetch-runtimes.sh || echo "install-deps: newer containerd releases not fetched (tests needing them skip; fail under CI=true)" >&2
fi

# A package's postinst may have started the system containerd; we never use
# nor stop it: our tests and demo run throwaway instances on their own sockets.

PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.cri-resmgr-installed"  # everything: it serves the demo too
demo_stamp="$VENV/.cri-resmgr-installed-demo"
fresh() { [ -f "$1" ] && [ ! setup.cfg -nt "$1" ] && [ ! pyproject.toml -nt "$1" ]; }
if [ "$mode" = demo ]; then
  if ! fresh "$stamp" && ! fresh "$demo_stamp"; then
    # The relay's run-time dependencies and uvloop, as on a node: what the demo runs.
    "$VENV/bin/pip" install -q -e '.[uvloop]'
    touch "$demo_stamp"
  fi
elif ! fresh "$stamp"; then
  "$VENV/bin/pip" install -q --upgrade pip setuptools wheel
  # agent: its tests run the real kubernetes client; test: lint, types, grpcio-tools.
  "$VENV/bin/pip" install -q -e '.[agent,test]'
  touch "$stamp"
fi
