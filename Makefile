# jobsched: every target creates .venv and installs what it needs when it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: install run test test-fast lint synth bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

## run: the local stack (embedded AWS, API on $$JOBSCHED_API_PORT or 8080), until Ctrl-C
run: $(STAMP)
	$(BIN)/jobsched local

## test: lint, then the whole suite (unit, integration, infra, slow end-to-end and crash tests)
test: $(STAMP) lint
	$(BIN)/python -m pytest -q

## test-fast: everything but the slow end-to-end tests
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check layers functions infra tests bench
	$(BIN)/mypy

## synth: the CloudFormation template `cdk deploy` would ship, offline, into cdk.out/
synth: $(STAMP)
	$(BIN)/python infra/app.py

## bench: benchmarks, printed as tables and written as JSON under bench/results/
bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) cdk.out build .pytest_cache .mypy_cache .ruff_cache
