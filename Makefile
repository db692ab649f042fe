# The two commands a newcomer runs: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: all deps demo lint test bench protos images clean

all: test

deps:
	@bash scripts/install-deps.sh

demo: deps
	$(PY) -m tests.harness.demo

# Lint, types (mypy --strict on the package, setup.cfg) and the layers (.importlinter,
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

clean:
	rm -rf build dist *.egg-info .pytest_cache
