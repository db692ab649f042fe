# The two commands a newcomer runs: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: all deps deps-demo demo lint test bench protos images install-node uninstall-node clean

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
