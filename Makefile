# `make test` and `make demo` set up .venv on a fresh machine, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-slow demo gpu-wheels clean

install: $(STAMP)

# xlstm is the mLSTM's test-only oracle; its declared dependencies (CUDA kernels) are not needed.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	$(PY) -m pip install --quiet --no-deps xlstm==2.0.0
	touch $(STAMP)

# One BLAS thread for the reference's many tiny matrices: spin-waiting OpenBLAS threads slow
# them down severalfold whenever another process shares the cores.
test: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -q

test-slow: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -q -m slow

demo: $(STAMP)
	$(PY) -m experiments.demo

# The wheels the lent GPU machine's python3 lacks for experiments/gpu_check.sh, into .whl/ (carried there).
gpu-wheels: $(STAMP)
	$(PY) -m experiments.bench.gpu_wheels --out .whl

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
