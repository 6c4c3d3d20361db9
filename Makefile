# One entry point for humans and CI. `make demo` runs the product; `make test` runs
# everything CI runs (lint, types, migrations check, the suite on every database).
# bash: the lanes of `make test` read a pipe's first status (PIPESTATUS).
SHELL := bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATABASES ?= sqlite postgres mariadb
IMAGE ?= localhost/everystep-runner:test
# The port of `make demo`'s UI: `make demo PORT=8001` when 8000 is taken.
PORT ?= 8000
BASE_IMAGE ?= docker.io/library/python:3.12-slim
# Extra `podman build` flags, e.g. a proxy CA: -v /etc/ssl/certs/ca-certificates.crt:/ca.crt:ro
# --build-arg PIP_CERT=/ca.crt (see .ci/run).
IMAGE_BUILD_FLAGS ?=
# Django 6 needs Python >= 3.12: `make compat` runs the SQLite tiers once more there, with
# USE_TZ = False (a project that keeps naive times), then the quickstart tier on Django 6.
# Every other SQLite tier runs with the OPTIONS docs/running/databases.md gives users
# (transaction_mode IMMEDIATE, tests/settings.py); compat is the one that keeps Django's
# default deferred BEGIN (EVERYSTEP_TEST_SQLITE_DEFAULT_TXN=1), a project that never set
# transaction_mode.
PYTHON_NEXT ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python) \
	$(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python) \
	$(shell command -v python3.12 python3.13 2>/dev/null))
VENV_NEXT ?= .venv-django6
# The manifest and Dockerfile checkers live in a venv of their own: checkov pins many
# dependencies that must not move the project's. Changing a pin reinstalls them.
VENV_TOOLS ?= .venv-tools
# The long tiers run on this many pytest workers (pytest-xdist), each with a database of
# its own on the same server: the suite mostly waits on worker subprocesses, so 2 in each
# of `make test`'s two lanes keep a 2-core machine busy (with 3 per lane one lane ran its
# first six tiers in 18 minutes, but an agather() test on PostgreSQL timed out under that
# load in two runs of four; with 2 it still failed once in two: docs/status.md). A test that stops a server runs alone (tests/exclusive.py).
# TEST_JOBS=0 runs them in one process.
TEST_JOBS ?= 2
PYTEST_PARALLEL := $(BIN)/pytest -n $(TEST_JOBS) --dist worksteal
TOOLS := checkov==3.3.30 kubernetes-validate==1.37.0
K8S_VERSION ?= 1.37.0

.PHONY: demo test lint docs unit bench-smoke quickstart integration pgbouncer several-databases modes netfaults compat browser image \
	image-test image-constraints compose-check install install-dev clean manifest-check install-tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e . -e ./image

# Installed once per change of the package metadata (a stamp in the venv): `make test`
# runs each tier as a make of its own, and a no-op pip install costs ~10 s each time.
install-dev: $(VENV)/.installed-dev
$(VENV)/.installed-dev: $(BIN)/python pyproject.toml image/pyproject.toml
	$(BIN)/pip install --quiet -e '.[postgres,mysql,metrics,sentry,otel,dev,docs]' -e ./image
	touch $@

demo: install
	$(BIN)/everystep-runner --ui-bind 127.0.0.1:$(PORT) demo

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy everystep image/everystep_runner

# The documentation site (mkdocs.yml): strict, so a broken link or anchor, or a page left
# out of the nav, fails. The site goes to build/docs (ignored by git). Its Python examples
# are run by tests/integration/test_docs_examples.py. No --quiet: it hides warnings from
# --strict, which then passes.
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean

unit: install-dev
	$(BIN)/pytest tests/unit

# Every bench script of bench/ at a tiny N, one database each, its result line to a
# temporary directory (tests/bench/test_bench_smoke.py; about 3 minutes). chaos.py runs on
# SQLite (it restarts database servers), netfaults.py its latency scenario only (the others
# need root network namespaces); bench/peers/ is left out (venvs of other projects).
bench-smoke: install-dev
	$(BIN)/pytest -n 2 --dist worksteal tests/bench

# The distributions as a user gets them: sdist and wheel of the library and the runner built
# and checked (twine check --strict), then docs/quickstart.md followed in a new virtualenv
# with the wheel (Django from the package index), up to a real worker completing a run.
quickstart: install-dev
	$(BIN)/pytest tests/packaging

# The integration tier runs once per database; under CI=true a skip fails the run. Its
# SQLite run has DEBUG = True, a new project's default (Django then logs every query).
DEBUG_DATABASES ?= sqlite
integration: install-dev
	@for db in $(DATABASES); do \
		debug=0; case " $(DEBUG_DATABASES) " in *" $$db "*) debug=1;; esac; \
		echo "== integration tests on $$db (DEBUG=$$debug)"; \
		EVERYSTEP_TEST_DB=$$db EVERYSTEP_TEST_DEBUG=$$debug \
			$(PYTEST_PARALLEL) tests/integration tests/acceptance || exit 1; \
	done

# The tiers below run again, under their configuration, the tests marked
# tiers("modes"), tiers("pooler") or tiers("several") (pytest --tier NAME, tests/conftest.py).
RETESTED := tests/integration tests/acceptance

# The modes of users' projects on every database: the time and worker tests with
# DEBUG = True, USE_TZ = False (naive local times in the database) and a zone far from UTC.
MODES_ENV := EVERYSTEP_TEST_DEBUG=1 EVERYSTEP_TEST_USE_TZ=0 EVERYSTEP_TEST_TIME_ZONE=America/New_York
modes: install-dev
	@for db in $(DATABASES); do \
		echo "== DEBUG, USE_TZ = False, America/New_York on $$db"; \
		EVERYSTEP_TEST_DB=$$db $(MODES_ENV) $(PYTEST_PARALLEL) --tier modes $(RETESTED) || exit 1; \
	done

# The PostgreSQL worker and acceptance tests once more through PgBouncer in transaction mode
# (.ci/pgbouncer start: 127.0.0.1:6432, as .ci/run does), with LISTEN over a direct alias;
# and that a worker there leaves the hot path unprepared (a pooled session is not its own).
pgbouncer: install-dev
	@pg_isready -q -h 127.0.0.1 -p 6432 || { echo "pgbouncer: nothing on 127.0.0.1:6432; run .ci/pgbouncer start"; exit 1; }
	EVERYSTEP_TEST_DB=postgres EVERYSTEP_TEST_PGBOUNCER=1 $(PYTEST_PARALLEL) --tier pooler $(RETESTED)

# A project with several databases (issue 22): everystep in "jobs", the project in "default"
# and a router sending everystep's reads to a replica and its writes to "default"
# (tests/settings.py, EVERYSTEP_TEST_ALIAS): the engine, the UI, commands, real workers.
several-databases: install-dev
	@for db in sqlite postgres; do \
		echo "== several databases on $$db"; \
		EVERYSTEP_TEST_DB=$$db EVERYSTEP_TEST_ALIAS=jobs $(PYTEST_PARALLEL) --tier several $(RETESTED) || exit 1; \
	done

# Dirty network faults between workers and their database (issue 37), on PostgreSQL and
# MariaDB: a blackhole (iptables DROP inside a network namespace the tests create, never
# the host's rules), delay, resets and an upstream switch (tests/netfaults/proxy.py), and a
# failover to a promoted PostgreSQL replica (clusters of the test's own). Root is needed
# for the namespaces. bench/netfaults.py and bench/failover.py are the long versions.
netfaults: install-dev
	@for db in postgres mariadb; do \
		echo "== network faults on $$db"; \
		EVERYSTEP_TEST_DB=$$db $(BIN)/pytest tests/netfaults || exit 1; \
	done

# The UI in a real browser: Debian's chromium (/usr/bin/chromium) driven by Playwright;
# axe-core (the accessibility rules the tests inject) from tests/browser's lockfile.
browser: install-dev
	cd tests/browser && npm ci --no-audit --no-fund
	$(BIN)/pytest -n 2 tests/browser

compat:
	@test -n "$(PYTHON_NEXT)" || { echo "compat: no Python >= 3.12 found; set PYTHON_NEXT"; exit 1; }
	test -x $(VENV_NEXT)/bin/python || $(PYTHON_NEXT) -m venv $(VENV_NEXT)
	$(VENV_NEXT)/bin/pip install --quiet 'Django>=6,<7' -e '.[postgres,metrics,sentry,otel,dev]' \
		-e ./image
	$(VENV_NEXT)/bin/python -c "import django; print('Django', django.__version__)"
	EVERYSTEP_TEST_DB=sqlite EVERYSTEP_TEST_USE_TZ=0 EVERYSTEP_TEST_SQLITE_DEFAULT_TXN=1 \
		$(VENV_NEXT)/bin/pytest -n $(TEST_JOBS) --dist worksteal tests/unit tests/integration tests/acceptance
	# The quickstart followed once more with this Python, so Django 6 from the index.
	$(VENV_NEXT)/bin/pytest tests/packaging/test_quickstart_wheel.py

# The runner image, built from the real Dockerfile (docker format keeps the HEALTHCHECK).
image:
	podman build --format docker --build-arg BASE_IMAGE=$(BASE_IMAGE) $(IMAGE_BUILD_FLAGS) \
		-t $(IMAGE) .

# image/constraints.txt (what the image installs) refreshed from an unpinned build: the
# newest releases the floors admit. Review the diff, run `make image-test`, commit.
image-constraints:
	podman build --format docker --build-arg BASE_IMAGE=$(BASE_IMAGE) \
		--build-arg CONSTRAINTS=/dev/null $(IMAGE_BUILD_FLAGS) -t $(IMAGE)-unpinned .
	{ grep '^#' image/constraints.txt; podman run --rm --entrypoint /opt/everystep/bin/pip \
		$(IMAGE)-unpinned freeze --all | grep -v ' @ ' | LC_ALL=C sort -f; } > image/constraints.new
	mv image/constraints.new image/constraints.txt

image-test: install-dev image
	EVERYSTEP_TEST_IMAGE=$(IMAGE) EVERYSTEP_TEST_BASE_IMAGE=$(BASE_IMAGE) $(BIN)/pytest tests/image

# compose.yaml requires DJANGO_SECRET_KEY; a throwaway one is enough to check the file.
compose-check: install-dev
	DJANGO_SECRET_KEY=compose-check-only $(BIN)/podman-compose -f compose.yaml config >/dev/null

install-tools:
	test -x $(VENV_TOOLS)/bin/python || $(PYTHON) -m venv $(VENV_TOOLS)
	@if [ "$$(cat $(VENV_TOOLS)/pins 2>/dev/null)" != "$(TOOLS)" ]; then \
		$(VENV_TOOLS)/bin/pip install --quiet --upgrade pip $(TOOLS) && \
		echo "$(TOOLS)" > $(VENV_TOOLS)/pins; \
	fi

# The Kubernetes example against the API schemas (strict: unknown fields fail), and it and
# the Dockerfile against checkov's security rules; skipped rules carry their reason inline
# and in docs/running/hardened.md. --skip-download: checkov runs offline, with its bundled
# rules only. config/deploy/ holds the replay check's Kubernetes Job.
# config/kubernetes/autoscaling/keda.yaml is KEDA's CRDs (ScaledObject,
# TriggerAuthentication), which kubernetes-validate has no schema for: it is left out of
# that step (checkov still reads it); docs/running/scaling.md says how it was checked
# against KEDA's own CRD schema.
manifest-check: install-tools
	$(VENV_TOOLS)/bin/kubernetes-validate --quiet --strict --kubernetes-version $(K8S_VERSION) \
		config/kubernetes/*.yaml config/kubernetes/autoscaling/hpa-prometheus.yaml \
		config/deploy/*.yaml
	$(VENV_TOOLS)/bin/checkov --quiet --compact --skip-download --framework kubernetes \
		-d config/kubernetes
	$(VENV_TOOLS)/bin/checkov --quiet --compact --skip-download --framework kubernetes \
		-f config/deploy/check-replay-job.yaml -f config/deploy/migrate-job.yaml
	$(VENV_TOOLS)/bin/checkov --quiet --compact --skip-download --framework dockerfile \
		-f Dockerfile

# Every tier, in two lanes that run side by side: the suite mostly waits (on worker
# subprocesses, timeouts, image builds), and one lane alone leaves much of the 2 cores
# idle. A test that stops a database server runs with no test that uses that server
# beside it, whatever the lane (tests/exclusive.py). Each line of output starts with its
# tier's name; each tier is timed into build/tiers.txt, printed at the end. A failed tier stops its lane, and the
# other lane starts no new tier.
LANE_1 := lint docs unit quickstart integration pgbouncer several-databases
LANE_2 := manifest-check bench-smoke netfaults modes browser compat compose-check image-test
TIERS := $(LANE_1) $(LANE_2)
test: install-dev install-tools
	@mkdir -p build && : > build/tiers.txt && rm -f build/failed
	@start=$$(date +%s); $(MAKE) --no-print-directory -j2 lane-1 lane-2; status=$$?; \
		echo "all $$(( $$(date +%s) - start )) s (the lanes side by side)" >> build/tiers.txt; \
		echo "== tiers (seconds):"; cat build/tiers.txt; exit $$status

.PHONY: lane-1 lane-2
lane-1 lane-2:
	@for tier in $(LANE_$(subst lane-,,$@)); do \
		[ ! -e build/failed ] || exit 1; \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory $$tier 2>&1 | sed -u "s/^/[$$tier] /"; \
		status=$${PIPESTATUS[0]}; \
		echo "$@ $$tier $$(( $$(date +%s) - start )) s$$([ $$status = 0 ] || echo ' FAILED')" \
			>> build/tiers.txt; \
		if [ $$status != 0 ]; then touch build/failed; exit $$status; fi; \
	done

clean:
	rm -rf $(VENV) $(VENV_NEXT) $(VENV_TOOLS) .pytest_cache .mypy_cache .ruff_cache *.egg-info
