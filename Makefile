# Two entry points do all set-up on a fresh machine: `make evolve` and `make test`.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Test workers (pytest-xdist): the tests mostly wait on subprocesses, so more workers than cores pay.
WORKERS ?= 4

.PHONY: install postgresql chromium lint typecheck test test-heavy test-browser test-all evolve bench smoke clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null)); \
	  else echo "bubblewrap (bwrap) is missing: install it (apt-get install bubblewrap) or run the host with --isolation none"; fi; }
	@$(MAKE) --no-print-directory postgresql
	@$(MAKE) --no-print-directory chromium
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[llm,dev]"
	@touch $(STAMP)

# The rule set and the mypy settings live in pyproject.toml ([tool.ruff], [tool.mypy]).
lint: install
	$(BIN)/python -m ruff check ole evogym tests experiments

typecheck: install
	$(BIN)/python -m mypy

# The default tier: every test not marked slow, heavy or browser, in minutes (pyproject.toml says the tiers).
test: install
	$(BIN)/python -m pytest -q -n $(WORKERS)

# Tests of more than a few seconds each (found with --durations); CI runs them after `make test`.
test-heavy: install
	$(BIN)/python -m pytest -q -n $(WORKERS) -m heavy --durations=15

# The PostgreSQL storage tests start a throw-away cluster with Debian's server binaries (ole.storage.local_server);
# where they cannot be installed, those tests fail with the install line (never a silent skip).
postgresql:
	@{ ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    (apt-get install -y -q postgresql >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null)); \
	  else echo "the PostgreSQL server is missing: install it (apt-get install postgresql) for the storage tests"; fi; }

# The report's browser tests drive Debian's chromium through chromium-driver (never a downloaded build).
chromium:
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null)); \
	  else echo "chromium/chromedriver are missing: install them (apt-get install chromium chromium-driver) for make test-browser"; fi; }

test-browser: install chromium
	$(BIN)/python -m pytest -q -m browser

test-all: install
	$(BIN)/python -m pytest -q -n $(WORKERS) -m ""

evolve: install
	$(BIN)/ole evolve --mode offline

# The reference v0.1.0 host runs beside ours when its source is there (skipped with a message otherwise).
REFERENCE_SRC ?= ../shared/reference/evopolicygym-v0.1.0/src

bench: install
	$(BIN)/python experiments/bench_host_overhead.py --episodes 64 --repeats 3 --reference-src $(REFERENCE_SRC) \
	  --out experiments/results/host_overhead.md

smoke: install
	$(BIN)/evogym suite smoke

clean:
	rm -rf $(VENV) .pytest_cache
