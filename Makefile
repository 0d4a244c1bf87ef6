# Two commands set everything up: `make demo` and `make test`. Each creates .venv from pyproject.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint format bench clean

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) on PATH (or run: make PY=python3 ...)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/frontdesk demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# mypy reads the package as it is installed: a link tree of the wheel's layout
# (frontdesk/experts -> experts/, ...), so `mypy -p frontdesk` sees the real import names.
TYPECHECK := build/typecheck
FOLDERS := experts orchestrator threads audit prompts examples

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

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
