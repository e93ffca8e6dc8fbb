# Two commands on a fresh machine:  `make run` (set up, run the main job)  ·  `make test` (set up, pass the tests)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1           # models load from local files only (DESIGN.md "Models, offline")
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run test lint clean-venv

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU torch first, pinned: an unpinned torch pulls a multi-gigabyte CUDA build
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

# The main job: every spark25 phase is one run; this runs the default suite and variant.
run: setup
	$(PY) -m experiments.run $(ARGS)

test: setup
	$(PY) -m pytest -q $(ARGS)

lint: setup
	$(VENV)/bin/ruff check retrieval experiments tests

clean-venv:
	rm -rf $(VENV)
