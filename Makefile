# trainhub: `make run` trains the JAX example across two local clusters; `make test` runs
# lint and every test, installing and starting what they need.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PACKAGES := schemas bus dispatcher workers trainhub trainhub_sandbox

.PHONY: run run-trainjob test lint native format bench bench-kafka bench-soak bench-restart bench-broker-loss bench-placement bench-kube bench-memory bench-redispatch clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,jax,torch]'
	touch $(STAMP)

# Placement's hot modules compiled with mypyc, cached per source version under
# ~/.cache/trainhub/native (dispatcher/native.py); without a C compiler it stays Python.
native: $(STAMP)
	$(BIN)/python -m dispatcher.build_native --optional

run: $(STAMP)
	$(BIN)/trainhub up --exit-on-finish \
		--cluster east:cpu=4,memory=8Gi --cluster west:cpu=8,memory=16Gi \
		examples/jax-mnist-spmd/jaxjob.yaml

# The same JAX example as a Kubeflow Trainer v2 TrainJob on the plain runtime.
run-trainjob: $(STAMP)
	$(BIN)/trainhub up --exit-on-finish \
		--cluster east:cpu=4,memory=8Gi --cluster west:cpu=8,memory=16Gi \
		examples/jax-mnist-spmd/trainjob.yaml

lint: $(STAMP)
	$(BIN)/ruff check $(PACKAGES) tests examples bench
	$(BIN)/mypy $(PACKAGES) tests examples bench

test: lint native
	$(BIN)/pytest -q

format: $(STAMP)
	$(BIN)/ruff format $(PACKAGES) tests examples bench
	$(BIN)/ruff check --fix $(PACKAGES) tests examples bench

bench: bench-placement bench-kafka bench-soak bench-restart bench-broker-loss bench-kube bench-memory bench-redispatch

bench-kube: native
	$(BIN)/python -m bench.kube_throughput

bench-kafka: native
	$(BIN)/python -m bench.hub_throughput

bench-soak: native
	$(BIN)/python -m bench.soak

bench-restart: native
	$(BIN)/python -m bench.restart

bench-memory: native
	$(BIN)/python -m bench.ledger_memory

bench-placement: native
	$(BIN)/python -m bench.placement

bench-redispatch: native
	$(BIN)/python -m bench.redispatch

bench-broker-loss: native
	$(BIN)/python -m bench.broker_loss

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
