# ragmesh — `make up` starts the whole mesh, `make test` runs the tests. Both install into .venv first.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
# torch is installed on its own first, pinned, so nothing later pulls a CUDA build.
TORCH  ?= torch==2.13.0
PKGS   := -e libs/api -e libs/common -e libs/store -e services/converter -e services/embedder \
          -e services/indexer -e services/search -e services/answer -e services/graph -e gateway -e 'cli[bridge]'
STAMP  := $(VENV)/.installed

.PHONY: install up up-ha test test-fast lint docs protos bench clean

install: $(STAMP)

$(STAMP): Makefile constraints.txt requirements-dev.txt libs/*/pyproject.toml services/*/pyproject.toml gateway/pyproject.toml cli/pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (or make PYTHON=/path/to/python3.11)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -c constraints.txt $(PKGS) -r requirements-dev.txt
	touch $(STAMP)

up: install
	$(BIN)/ragmesh up

# The replicated topology as processes on loopback: two embedders, two answer services, two gateways behind
# HAProxy, jobs and sessions on Redis (deploy/local/; docs/high-availability.md). UP_HA_ARGS="--backend hash".
up-ha: install
	bash scripts/system-deps.sh
	$(BIN)/python -m deploy.local.topology $(UP_HA_ARGS)

# Every tier (unit, e2e, slow, browser, deploy: pyproject.toml and conftest.py). test-fast: the unit tier
# alone, in one process, without a mesh, a real model or child processes (under 2 minutes on 2 cores).
test: install
	bash scripts/system-deps.sh
	$(BIN)/python -m pytest

test-fast: install
	$(BIN)/python -m pytest -m unit

# Static checks, each a step of its own: the contract (lint, and no breaking change since the latest release),
# style, the import layers (.importlinter), the types (pyproject.toml's [tool.mypy]) and the generated reference
# pages (scripts/gen_docs.py: settings, error reasons, OpenAPI).
RELEASE := $(shell ls protos/releases/v*.binpb | sort -V | tail -n 1)
lint: install
	$(BIN)/buf lint
	$(BIN)/buf breaking --against $(RELEASE)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	$(BIN)/python scripts/gen_docs.py --check

# The docs site (docs/, mkdocs.yml) into build/site; --strict turns every warning into an error.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

protos: install
	$(BIN)/python scripts/gen_protos.py

# Every benchmark side by side -> bench/results/<date>-<host>.md/.json (BENCH_ARGS="--store-points 1000000").
# The bench extra (LangChain baseline) goes into .venv only, never into a service or an image.
bench: install
	$(PIP) install --quiet -c constraints.txt -r bench/requirements.txt
	$(BIN)/python -m bench.report $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .ragmesh .pytest_cache
