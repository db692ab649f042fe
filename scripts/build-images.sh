#!/usr/bin/env bash
# Builds (or finds cached) the OCI image-layout tarball holding the test images
# localhost/busybox:latest and localhost/pause:latest, made from the static
# busybox binary; no registry involved. Prints the tarball's path.
#
#   scripts/build-images.sh [--cache-dir DIR] [--busybox /bin/busybox]
#
# Cache: $CRI_RESMGR_IMAGE_CACHE, else ~/.cache/cri-resmgr/images. To import it
# by hand into a throwaway instance (containerd-up.sh already does):
#   ctr -a DIR/containerd.sock -n k8s.io images import "$(scripts/build-images.sh)"
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
[ -x "$python" ] || python=python3  # the builder needs only the standard library
PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} exec "$python" -m tests.harness.images "$@"
