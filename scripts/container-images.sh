#!/usr/bin/env bash
# Builds the deployable container images (webhook, agent) where a container
# build tool actually works. The development and CI machines have none (a
# docker client without a daemon), so there it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${TAG:-latest}
builder=""
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  builder=docker
elif command -v podman >/dev/null && podman info >/dev/null 2>&1; then
  builder=podman
elif command -v buildah >/dev/null; then
  builder="buildah"
fi
if [ -z "$builder" ]; then
  echo "container-images: no working container build tool (docker daemon, podman, buildah) here;" \
       "build webhook/Dockerfile and agent/Dockerfile on a machine that has one" >&2
  exit 0
fi
for component in webhook agent; do
  [ -f "$component/Dockerfile" ] || continue
  echo "building cri-resmgr-$component:$TAG with $builder"
  if [ "$builder" = buildah ]; then
    buildah bud -f "$component/Dockerfile" -t "cri-resmgr-$component:$TAG" .
  else
    "$builder" build -f "$component/Dockerfile" -t "cri-resmgr-$component:$TAG" .
  fi
done
