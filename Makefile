# The two commands the README opens with. Both create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CLUSTER ?= examples/cluster/n1.conf examples/cluster/n2.conf examples/cluster/n3.conf
CONFIG ?= examples/single.conf

.PHONY: run run-single test lint bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

run: $(STAMP)
	exec $(BIN)/python -m jetraft.server.local_cluster $(CLUSTER)

run-single: $(STAMP)
	exec $(BIN)/jetraft server -c $(CONFIG)

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m benchmarks.core_pubsub
	$(BIN)/python -m benchmarks.js_publish
	$(BIN)/python -m benchmarks.js_consume
	$(BIN)/python -m benchmarks.js_store
	$(BIN)/python -m benchmarks.js_cluster

clean:
	rm -rf $(VENV) build src/*.egg-info
