# Two commands matter: `make demo` and `make test`. Both create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip

.PHONY: setup test demo lint format bench clean

setup: $(STAMP)

# The stamp depends on pyproject/constraints so edits re-run the install (idempotent).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt "torch==2.13.0"
	$(PIP) install -q -c constraints.txt -e ".[dev,gym,textarena,scale,openenv,reasoning-gym,textworld]"
	touch $(STAMP)

# one pytest worker per core (pytest-xdist); each test keeps one torch thread, and the Ray /
# torch.distributed tests share one worker (tests/conftest.py)
test: setup
	$(BIN)/python -m pytest -q -n auto --dist loadgroup tests

demo: setup
	$(BIN)/python -m ragen.demo

lint: setup
	$(BIN)/ruff check ragen tests bench experiments
	$(BIN)/ruff format --check ragen tests bench experiments

format: setup
	$(BIN)/ruff check --fix ragen tests bench experiments
	$(BIN)/ruff format ragen tests bench experiments

bench: setup
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) runs .pytest_cache
