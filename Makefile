# Two commands on a fresh machine:  make demo   |   make test
# Both create .venv and install what they need (Python >= 3.11).

SHELL := /bin/bash
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
             command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
             && { command -v $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# a second server to prove compatibility (the machine's PostgreSQL 15); skipped if it does not answer
PG15_DSN ?= postgresql://postgres@127.0.0.1:5432/postgres
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider

.PHONY: help demo test lint test-fast test-pg15 bench bench-protocol bench-console bench-bulk screenshots clean

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: Python >= 3.11 is needed (python3.11 or newer on PATH)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@rm -f $(VENV)/.installed-* && touch $@

# Each target says what it does after `##` on its own line: `make help` lists them from there.
help: ## list the targets, one line each
	@echo "make TARGET  (ARGS='…' passes options to demo and the benchmarks)"
	@awk -F ':.*## ' '/^[a-z0-9-]+:.*## / { printf "  %-15s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

demo: $(STAMP) ## open the console on a live simulated fleet (embedded PostgreSQL)
	$(BIN)/leasectl demo $(ARGS)

lint: $(STAMP) ## ruff, mypy and import-linter
	$(BIN)/ruff check --output-format concise .
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: tools bench-metrics
# promtool and the Prometheus server, for the metrics tests (Debian's prometheus package), and
# Alertmanager with amtool, for the alerting tier (Debian's prometheus-alertmanager, whose server is
# /usr/bin/prometheus-alertmanager); installed when missing. Where they cannot be installed (no root, no apt) those tests skip and say why.
tools: ## install promtool, prometheus, alertmanager and amtool for the metrics and alerting tests, when missing and possible
	@if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 \
	   && { command -v prometheus-alertmanager || command -v alertmanager; } >/dev/null 2>&1 \
	   && command -v amtool >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "== installing Debian's prometheus and prometheus-alertmanager packages for the metrics and alerting tests"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null \
	  || echo "warning: prometheus/prometheus-alertmanager could not be installed: the tests that need them will skip"; \
	else echo "warning: promtool/prometheus/alertmanager/amtool missing and not root with apt-get: the tests that need them will skip"; fi

.PHONY: ha-tools test-ha
# Patroni and etcd (Debian's patroni and etcd-server packages) for the HA tier, which runs them with
# the machine's PostgreSQL 15 binaries; installed when missing. Where they cannot be installed (no
# root, no apt) that tier skips and says why; `make test-ha` fails instead.
ha-tools: ## install patroni and etcd for the HA tier, when missing and possible
	@if command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "== installing Debian's patroni and etcd-server packages for the HA tier"; \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patroni etcd-server >/dev/null \
	   || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patroni etcd-server >/dev/null; }) \
	  || echo "warning: patroni/etcd could not be installed: the HA tier will skip"; \
	else echo "warning: patroni/etcd missing and not root with apt-get: the HA tier will skip"; fi

# The HA tier with the fleet given longer between the switchover and the kill (CI runs it short)
test-ha: ha-tools $(STAMP) ## a real Patroni cluster: a fleet through a switchover and a kill -9 of the primary
	LEASECTL_HA_REQUIRED=1 LEASECTL_HA_PHASE_SECONDS=15 LEASECTL_MIN_TESTS=1 $(PYTEST) -s -m ha tests/ha

.PHONY: pgbouncer
# PgBouncer (Debian's pgbouncer package) for the pooler tier, which starts its own in transaction
# mode in front of the test server (tests/pooler: its own ini, a free loopback port); installed when
# missing. Debian's package also sets up a pgbouncer service, idle with its default configuration.
# Where it cannot be installed (no root, no apt) those tests skip and say why.
pgbouncer: ## install pgbouncer for the pooler tests, when missing and possible
	@if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "== installing Debian's pgbouncer package for the pooler tests"; \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null \
	   || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null; }) \
	  || echo "warning: pgbouncer could not be installed: the pooler tests will skip"; \
	else echo "warning: pgbouncer missing and not root with apt-get: the pooler tests will skip"; fi

.PHONY: browser-tools test-browser
# Chromium and its driver (Debian's chromium and chromium-driver packages) for the browser tier,
# which drives `leasectl serve` in a headless Chromium through selenium pointed at those binaries
# (nothing is downloaded at run time); installed when missing. Where they cannot be installed (no
# root, no apt) that tier skips and says why; `make test-browser` fails instead.
browser-tools: ## install chromium and chromedriver for the browser tier, when missing and possible
	@if { command -v chromium || [ -x /usr/bin/chromium ]; } >/dev/null 2>&1 \
	   && { command -v chromedriver || [ -x /usr/bin/chromedriver ]; } >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "== installing Debian's chromium and chromium-driver packages for the browser tier"; \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null \
	   || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }) \
	  || echo "warning: chromium/chromium-driver could not be installed: the browser tier will skip"; \
	else echo "warning: chromium/chromedriver missing and not root with apt-get: the browser tier will skip"; fi

# The browser tier alone; here, unlike in `make test`, a missing chromium fails the run instead of skipping it
test-browser: browser-tools $(STAMP) ## a real headless Chromium: sign in, filter, cancel as oneself; what the server refuses
	LEASECTL_BROWSER_REQUIRED=1 LEASECTL_MIN_TESTS=5 $(PYTEST) -m browser tests/browser

# Everything, on the embedded PostgreSQL 18; the wheel as a user installs it (a fresh virtualenv,
# not editable, run from outside the checkout); then the database tier on PostgreSQL 15, but for
# its slow tests (the random-kill stress test, the benchmarks' smoke runs), which ran on 18 just
# before: with them the whole took 846 s of CI's 15 minutes on a slower machine of this kind.
# LEASECTL_MIN_TESTS makes a run that collects too few tests fail instead of passing quietly.
test: tools ha-tools pgbouncer browser-tools lint ## lint, then every test tier on PostgreSQL 18, PgBouncer, alerting, the browser, the wheel, HA, and 15
	LEASECTL_MIN_TESTS=350 $(PYTEST) -n 4 -m "not slow and not wheel and not ha and not pooler and not alerting and not browser" tests
	LEASECTL_MIN_TESTS=10 $(PYTEST) -m pooler tests/pooler
	LEASECTL_MIN_TESTS=1 $(PYTEST) -n 2 -m alerting tests/alerting
	LEASECTL_MIN_TESTS=5 $(PYTEST) -m browser tests/browser
	LEASECTL_MIN_TESTS=1 $(PYTEST) -m slow tests
	LEASECTL_MIN_TESTS=1 $(PYTEST) -s -m ha tests/ha
	LEASECTL_MIN_TESTS=3 $(PYTEST) -m wheel tests/wheel
	@$(MAKE) --no-print-directory test-pg15

.PHONY: test-alerting
# The alerting tier: a real Prometheus (docs/alerts.yml) and a real Alertmanager (docs/alertmanager.yml)
# on loopback, scraping `leasectl metrics serve`; a call entering outcome_unknown pages a webhook in
# the test. Here, unlike in `make test`, missing binaries fail the run instead of skipping it.
test-alerting: tools $(STAMP) ## a real Prometheus and Alertmanager: an unknown outcome reaches a webhook
	LEASECTL_ALERTING_REQUIRED=1 LEASECTL_MIN_TESTS=1 $(PYTEST) -m alerting tests/alerting

test-pg15: $(STAMP) ## the database tier on PostgreSQL 15 (PG15_DSN), skipped when it does not answer
	@if $(BIN)/python -c "import psycopg,sys; psycopg.connect('$(PG15_DSN)', connect_timeout=3).close()" 2>/dev/null; then \
	  echo "== database tier again on $(PG15_DSN)"; \
	  LEASECTL_TEST_DSN='$(PG15_DSN)' LEASECTL_MIN_TESTS=100 $(PYTEST) -n 4 -m "not slow" tests/db; \
	else echo "== $(PG15_DSN) does not answer: PostgreSQL 15 pass skipped"; fi

test-fast: $(STAMP) ## every tier but the slow tests and the wheel, no lint
	$(PYTEST) -n 4 -m "not slow and not wheel and not ha and not alerting and not browser" tests

bench: bench-protocol bench-rules bench-console bench-bulk bench-metrics bench-audit bench-scale bench-history bench-web ## every benchmark below

.PHONY: bench-audit bench-scale
bench-scale: $(STAMP) ## a fleet at the size agents run
	$(BIN)/python -m tests.bench.scale $(ARGS)

bench-audit: $(STAMP) ## the auditor's tools over a big history
	$(BIN)/python -m tests.bench.audit $(ARGS)

.PHONY: bench-web
bench-web: $(STAMP) browser-tools ## the console in a browser: sessions held at once, memory per session, keystroke-to-screen latency
	$(BIN)/python -m tests.bench.web $(ARGS)

.PHONY: bench-history
bench-history: $(STAMP) ## the history partitioned by month against one table (10M events; ARGS='--events N'), and 0021's conversion of 1M
	$(BIN)/python -m tests.bench.history $(ARGS)
	$(BIN)/python -m tests.bench.conversion

bench-protocol: $(STAMP) ## the lease protocol's throughput, against its peers and the machine's ceiling
	$(BIN)/python -m tests.bench.protocol $(ARGS)

.PHONY: bench-rules
bench-rules: $(STAMP) ## what each rule the database enforces costs a call, each taken away in turn, against 0013
	$(BIN)/python -m tests.bench.rules $(ARGS)

bench-console: $(STAMP) ## the console's costs: its reads and refreshes over a big history
	$(BIN)/python -m tests.bench.console $(ARGS)

bench-bulk: $(STAMP) ## bulk actions: 1,000 calls, batched against both alternatives
	$(BIN)/python -m tests.bench.bulk $(ARGS)

bench-metrics: $(STAMP) ## what the metrics cost over a big history
	$(BIN)/python -m tests.bench.metrics $(ARGS)

screenshots: $(STAMP) ## regenerate the SVGs in screenshots/
	$(BIN)/leasectl screenshots

clean: ## remove .venv and the tools' caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
