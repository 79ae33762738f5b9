# jobsched: every target creates .venv and installs what it needs when it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: install run test test-fast lint layer synth bench soak sim clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

## run: the local stack (embedded AWS, API on $$JOBSCHED_API_PORT or 8080), until Ctrl-C
run: $(STAMP)
	$(BIN)/jobsched local

## test: lint, then the whole suite (unit, integration, infra, slow end-to-end and crash tests), on
## TEST_WORKERS processes (pytest-xdist), a test file to a process: most slow tests wait on real time.
## The fuzz file runs after, in a pytest of its own: schemathesis gives all its cases one node id,
## which xdist cannot schedule (tests/conftest.py refuses such ids under -n).
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist loadfile --ignore=tests/e2e/test_fuzz.py
test: $(STAMP) lint
	$(BIN)/python -m pytest -q $(PARALLEL)
	$(BIN)/python -m pytest -q tests/e2e/test_fuzz.py

## test-fast: everything but the slow end-to-end tests
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow"
	$(BIN)/python -m pytest -q tests/e2e/test_fuzz.py -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check layers functions infra tests bench
	$(BIN)/mypy
	$(BIN)/mypy bench

## layer: the Lambda layer into build/layer (JOBSCHED_LAYER_NO_DEPS=1: jobsched alone, offline)
layer: $(STAMP)
	$(BIN)/python infra/build_layer.py

## synth: the layer (pip downloads its dependencies unless JOBSCHED_LAYER_NO_DEPS=1), then, offline,
## the CloudFormation template and assets `cdk deploy --app cdk.out` ships, into cdk.out/
synth: layer
	$(BIN)/python infra/app.py

## bench: lateness, throughput vs. floor, cost per run, cold start, head-of-line, fairness, pools: tables, JSON under
## bench/results/ (about 20 min; BENCH_ARGS=--quick: about 13, BENCH_ARGS="--only a,d": some tables)
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

## soak: a sustained mixed load on the local stack, then every job accounted for (SOAK_MINUTES=10)
SOAK_MINUTES ?= 10
soak: $(STAMP)
	$(BIN)/python -m bench.soak --minutes $(SOAK_MINUTES)

## chaos: the seeded chaos harness over 20 schedules (seeds 3 and 8 run in make test)
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos.harness --seeds 20 --seconds 240

## fuzz: schemathesis against the local stack's OpenAPI document, 300 random cases per operation
## (make test runs the same test with 30; JOBSCHED_FUZZ_EXAMPLES=N to change)
JOBSCHED_FUZZ_EXAMPLES ?= 300
.PHONY: fuzz
fuzz: $(STAMP)
	JOBSCHED_FUZZ_EXAMPLES=$(JOBSCHED_FUZZ_EXAMPLES) $(BIN)/python -m pytest -q --timeout 1800 tests/e2e/test_fuzz.py

## sim: the deterministic simulator (tests/sim) over SIM_SEEDS seeded fault schedules on SIM_WORKERS processes,
## then the search for each planted bug (--mutants); table on stdout, JSON in bench/results/sim.json
## (about 30 min on 2 cores; Ctrl-C records what is done; SIM_ARGS="--mutant NAME" plants one bug instead;
## test_sim.py is the CI subset)
SIM_SEEDS ?= 10000
SIM_WORKERS ?= 2
SIM_ARGS ?=
sim: $(STAMP)
	$(BIN)/python -m tests.sim --seeds $(SIM_SEEDS) --workers $(SIM_WORKERS) --record --quiet --mutants $(SIM_ARGS)

clean:
	rm -rf $(VENV) cdk.out build .pytest_cache .mypy_cache .ruff_cache
