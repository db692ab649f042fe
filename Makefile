# The two commands a newcomer runs: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: all deps deps-demo deps-vm demo lint test test-vm bench protos images install-node uninstall-node clean

all: test

deps:
	@bash scripts/install-deps.sh

# Only what the demo runs (no Go, mypy, ruff, kubernetes client): scripts/install-deps.sh demo.
deps-demo:
	@bash scripts/install-deps.sh demo

demo: deps-demo
	$(PY) -m tests.harness.demo

# Lint, types (mypy --strict on the package, the agent and the webhook; setup.cfg) and the layers (.importlinter,
# docs/architecture.md): `make test` fails on any of them before running a test.
lint: deps
	$(VENV)/bin/ruff check cri_resmgr agent webhook tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

# What the VM suite adds: qemu-system-x86 and mmdebstrap (scripts/install-deps.sh vm).
deps-vm: deps
	@bash scripts/install-deps.sh vm

# The VM suite (docs/vm.md): a cgroup-v2 Debian 12 guest under qemu, one boot per NUMA
# topology, the tests of tests/vm/guest in it. Builds the guest image first when none is
# cached for these inputs (/var/cache/cri-resmgr-test/vm). Not part of `make test`.
test-vm: deps-vm
	$(PY) -m pytest tests/vm -v -s $(PYTEST_ARGS)

bench: deps
	$(PY) -m tests.bench

protos: deps
	bash scripts/gen-protos.sh

# Test images (busybox, pause) as an OCI tarball; container images where a build tool works.
images:
	bash scripts/build-images.sh
	bash scripts/container-images.sh

# On a node, as root (docs/node-install.md): the relay under /opt/cri-resmgr, its unit and
# sample configuration; INSTALL_ARGS=--agent adds the agent, --webhook the webhook.
install-node:
	bash scripts/install-node.sh install $(INSTALL_ARGS)

uninstall-node:
	bash scripts/install-node.sh uninstall

clean:
	rm -rf build dist *.egg-info .pytest_cache
