# Set-up is idempotent: every entry point below installs what it needs when missing.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= demo-out

.PHONY: setup deps venv native demo test lint clean

setup: deps venv native

deps:
	@bash scripts/install-deps.sh

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

native:
	@$(MAKE) -s -C native

demo: setup
	$(VENV)/bin/mallocbench run examples/quick.toml --out $(OUT)
	@echo
	@echo "Report: $(OUT)/report.html and $(OUT)/report.md  (results: $(OUT)/results.json)"

test: setup
	@bash scripts/install-deps.sh chromium systemd postgresql-15
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy src
	$(PY) -m pytest -q tests

lint: venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy src

clean:
	rm -rf $(VENV) $(OUT) native/build .pytest_cache
