#!/usr/bin/env bash
# Builds the deployable container images (relay, webhook, agent) where a container
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
       "build cri_resmgr/Dockerfile, webhook/Dockerfile and agent/Dockerfile on a machine that has one" >&2
  exit 0
fi
# image name:Dockerfile (tests/node/test_dockerfiles.py reads this table)
for pair in cri-resmgr:cri_resmgr/Dockerfile cri-resmgr-webhook:webhook/Dockerfile cri-resmgr-agent:agent/Dockerfile; do
  image=${pair%%:*} dockerfile=${pair#*:}
  echo "building $image:$TAG with $builder"
  if [ "$builder" = buildah ]; then
    buildah bud -f "$dockerfile" -t "$image:$TAG" .
  else
    "$builder" build -f "$dockerfile" -t "$image:$TAG" .
  fi
done
