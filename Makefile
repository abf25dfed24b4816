# The two commands the README opens with. Both create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CLUSTER ?= examples/cluster/n1.conf examples/cluster/n2.conf examples/cluster/n3.conf
CONFIG ?= examples/single.conf

# The optional compiled build (setup.py: mypyc, JETRAFT_MYPYC=1), installed into a directory of
# its own that goes first on PYTHONPATH: the editable pure-Python install in .venv stays as it is.
MYPYC_SITE := $(CURDIR)/build/mypyc-site
COMPILED_TESTS ?= tests/unit tests/integration
BUILD_LOG := $(VENV)/compiled-build.log
SERVERLESS_TESTS := tests/unit tests/raft tests/sim
# The Spark suite runs alone, in one process: beside another worker, its first cluster test
# (step-downs of a nats-server stream while a Spark job reads) timed out in 2 of 4 runs, and a
# timeout inside a py4j call breaks the Spark session for every test after it.
SERIAL_TESTS := tests/spark
# Two pytest workers (pytest-xdist), each taking whole test files: most tests wait on servers,
# elections and timers, and one worker kept the 2 cores about a third busy.
PYTEST := $(BIN)/pytest -q -p no:cacheprovider -n $(or $(TEST_WORKERS),2) --dist loadfile

.PHONY: run run-single test test-compiled compiled lint bench bench-compiled clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	JETRAFT_MYPYC=0 $(BIN)/pip install --quiet -e '.[dev,spark]'  # pure: the reference build
	touch $(STAMP)

run: $(STAMP)
	exec $(BIN)/python -m jetraft.server.local_cluster $(CLUSTER)

run-single: $(STAMP)
	exec $(BIN)/jetraft server -c $(CONFIG)

# Three steps. (1) The compiled build (one C compiler process, about 3 minutes) runs in the
# background beside mypy, the import contracts and the suites that need no server or clock
# (unit, RAFT, simulator: one CPU-bound process), so the two cores are both used and nothing
# timing-sensitive runs beside the compiler. (2) The rest of the suite on the pure build, in
# two workers, then the Spark suite in one process. (3) The unit and integration suites on
# the compiled build, in two workers.
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks setup.py build_support
	@echo "compiled build: started in the background, its output follows the unit suites"
	@$(MAKE) --no-print-directory compiled > $(BUILD_LOG) 2>&1 & build=$$!; \
	status=0; \
	{ $(BIN)/mypy && $(BIN)/lint-imports && \
	  $(BIN)/pytest -q -p no:cacheprovider $(SERVERLESS_TESTS); } || status=$$?; \
	wait $$build; built=$$?; cat $(BUILD_LOG); \
	if [ $$status -ne 0 ]; then exit $$status; fi; \
	if [ $$built -ne 0 ]; then echo "compiled build failed"; exit $$built; fi
	$(PYTEST) $(addprefix --ignore=,$(SERVERLESS_TESTS) $(SERIAL_TESTS))
	$(BIN)/pytest -q -p no:cacheprovider $(SERIAL_TESTS)
	PYTHONPATH=$(MYPYC_SITE) $(PYTEST) $(COMPILED_TESTS)

# Build the compiled modules afresh (build/ holds mypyc's C sources and setuptools' output) and
# check that they, not the .py files, are what Python imports from $(MYPYC_SITE).
compiled: $(STAMP)
	rm -rf build
	JETRAFT_MYPYC=1 $(BIN)/pip install --quiet --no-deps --target $(MYPYC_SITE) .
	PYTHONPATH=$(MYPYC_SITE) $(BIN)/python -c \
		"import jetraft, sys; print('jetraft build:', jetraft.build_name()); \
		sys.exit(not jetraft.compiled_modules())"

# The unit and integration suites again, on the compiled build (server processes the tests
# start inherit PYTHONPATH, so they run it too). The cluster, CLI, simulator and Spark suites
# exercise the same modules through the same code and run on the pure build only.
test-compiled: compiled
	PYTHONPATH=$(MYPYC_SITE) $(PYTEST) $(COMPILED_TESTS)

bench-compiled: compiled
	PYTHONPATH=$(MYPYC_SITE) $(BIN)/python -m benchmarks.core_pubsub
	PYTHONPATH=$(MYPYC_SITE) $(BIN)/python -m benchmarks.js_publish

bench: $(STAMP)
	$(BIN)/python -m benchmarks.core_pubsub
	$(BIN)/python -m benchmarks.js_publish
	$(BIN)/python -m benchmarks.js_consume
	$(BIN)/python -m benchmarks.js_store
	$(BIN)/python -m benchmarks.js_cluster

clean:
	rm -rf $(VENV) build src/*.egg-info
	find src -name '*.so' -delete  # left by an editable compiled install (pip install -e)
