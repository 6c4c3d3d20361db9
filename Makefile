# One entry point for humans and CI. `make demo` runs the product; `make test` runs
# everything CI runs (lint, types, migrations check, the suite on every database).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATABASES ?= sqlite postgres mariadb

.PHONY: demo test lint unit integration install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e .

install-dev: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[postgres,mysql,metrics,sentry,otel,dev]' -e ./image

demo: install
	$(BIN)/python image/demo_project/run_demo.py

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy everystep image/everystep_runner

unit: install-dev
	$(BIN)/pytest tests/unit

# The integration tier runs once per database; under CI=true a skip fails the run.
integration: install-dev
	@for db in $(DATABASES); do \
		echo "== integration tests on $$db"; \
		EVERYSTEP_TEST_DB=$$db $(BIN)/pytest tests/integration tests/acceptance || exit 1; \
	done

test: lint unit integration

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
