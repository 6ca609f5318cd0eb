# Two entry points for a fresh machine: `make demo` (the main job, offline, on the embedded model)
# and `make test`. Both create or reuse the virtual environment in .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.rein-installed

.PHONY: demo test bench lint install clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch is pinned to the CPU build first, so nothing later can pull a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# Every extra (all) and the second model, as the test suite needs; `pip install .` alone is the
	# lean core (.ci/core_check.sh tests it).
	$(BIN)/python -m pip install --quiet -e '.[all,qwen-1.5b,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/rein demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

clean-venv:
	rm -rf $(VENV)
