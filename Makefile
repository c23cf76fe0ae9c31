# Two commands, each setting itself up from a fresh clone:
#   make demo    compare two small models with the quickstart example and print the table
#   make test    run the test suite
# and the documentation:
#   make docs    build the HTML docs (warnings are errors) into docs/_build/html
# Each creates the virtual environment $(VENV) with $(PYTHON) if missing and (re)installs the
# project into it, editable with its test extras (docs extras for make docs), whenever
# pyproject.toml changes.
# Other stack:  make test PYTHON=python3.12 VENV=.venv-312
# Extra pytest arguments:  make test PYTEST_ARGS="--runslow -x"  (-n 0: no worker processes)

PYTHON ?= python3
VENV ?= .venv
PYTEST_ARGS ?=
SPHINXOPTS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.pymc-evidence-installed
DOCS_STAMP := $(VENV)/.pymc-evidence-docs-installed

.PHONY: demo test docs install install-docs check-venv clean-venv

demo: install
	$(BIN)/python examples/quickstart.py

# One pytest worker per core, each taking whole test files, so that a file's module-scoped
# fixtures (compiled models) are built once; PYTEST_ARGS="-n 0" runs in one process.
test: install
	$(BIN)/python -m pytest -q -n auto --dist loadfile $(PYTEST_ARGS)

# Sphinx with -W: any warning (a broken reference, a docstring markup error) fails the build.
docs: install-docs
	rm -rf docs/api  # autosummary's stubs, regenerated: none left over from renamed names
	$(BIN)/python -m sphinx -W --keep-going -b html $(SPHINXOPTS) docs docs/_build/html

install: $(STAMP)

install-docs: $(DOCS_STAMP)

# A venv made by another interpreter would silently test the wrong stack: refuse it.
check-venv: $(BIN)/python
	@want=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	have=$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	if [ "$$want" != "$$have" ]; then \
		echo "error: $(VENV) runs Python $$have but PYTHON=$(PYTHON) is Python $$want;" \
		     "choose another VENV=... or remove $(VENV)" >&2; \
		exit 1; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | check-venv
	$(BIN)/python -m pip install --no-input -e ".[test]"
	@touch $@

$(DOCS_STAMP): pyproject.toml | check-venv
	$(BIN)/python -m pip install --no-input -e ".[docs]"
	@touch $@

clean-venv:
	rm -rf $(VENV)
