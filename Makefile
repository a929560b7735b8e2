# Set-up is idempotent: every entry point below installs what it needs when missing.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= demo-out
# The demo's experiment: any family's (examples/postgresql.toml runs PostgreSQL).
EXPERIMENT ?= examples/quick.toml
# pytest-xdist workers for `make test`: most server tests wait on servers, sysbench and
# their timeouts, so more workers than cores keep the cores busy; tests marked `alone`
# (timing, CPU, noise) still run by themselves (tests/conftest.py). 4 workers were not
# reliably faster on 2 cores (9:58 and 10:51 of pytest against 10:42 for 3, on clean
# checkouts) and load the timing-sensitive tests more. TEST_WORKERS=0 runs the suite in
# one process.
TEST_WORKERS ?= 3
# Longest first, and tests that share a module's server on one worker: tests/scheduling.py.
DIST := $(if $(filter 0,$(TEST_WORKERS)),,--dist loadgroup)
# What pytest runs; e.g. `make test TESTS=tests/test_layout.py` for one module.
TESTS ?= tests

# Where `make install` puts the recording shim: PREFIX/lib/mallocbench/libmbrecord.so.
PREFIX ?= /usr/local

.PHONY: setup deps venv lock native bytecode demo test lint clean bench-help dist install docs

setup: deps venv native bytecode

deps:
	@bash scripts/install-deps.sh

# constraints.txt pins every package of the venv, dependencies of dependencies included,
# so each host of a cluster and each CI run installs the same versions; pyproject.toml
# keeps the ranges the code works with. `make lock` refreshes the pins on purpose.
# uv (itself pinned there) installs the set in seconds where pip takes one to two
# minutes, most of a clean checkout's `make test` set-up; pip remains the fallback where
# uv has no wheel or cannot reach the index. uv writes no bytecode unless asked (pip
# does): without it, and with PYTHONDONTWRITEBYTECODE set as on these hosts, every
# mallocbench process would compile scipy, numpy and the rest again, about 0.7 s each.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	@if $(PY) -m pip install -q -c constraints.txt uv \
	  && $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -c constraints.txt \
	    -e '.[dev]'; then :; \
	else \
	  echo "uv failed: installing with pip"; \
	  $(PY) -m pip install -q -c constraints.txt --upgrade pip \
	  && $(PY) -m pip install -q -c constraints.txt -e '.[dev]'; \
	fi
	@touch $(STAMP)

venv: $(STAMP)

# The newest versions pyproject.toml allows, resolved in a fresh venv (not this one, which
# may hold packages installed by hand), written to constraints.txt; the venv follows.
lock:
	@rm -rf $(VENV)-lock
	@python3 -m venv $(VENV)-lock
	@$(VENV)-lock/bin/python -m pip install -q --upgrade pip
	@$(VENV)-lock/bin/python -m pip install -q -e '.[dev]'
	@{ echo "# Written by \`make lock\` on $$(date -u +%F) for Python $$($(VENV)-lock/bin/python -c 'import platform; print(platform.python_version())'); edit pyproject.toml, not this."; \
	  $(VENV)-lock/bin/python -m pip freeze --all --exclude-editable | grep -v -E '^(mallocbench|setuptools|wheel)=='; } > constraints.txt.new
	@mv constraints.txt.new constraints.txt
	@rm -rf $(VENV)-lock
	@$(MAKE) -s venv
	@echo "constraints.txt: $$(grep -c '==' constraints.txt) pinned packages"

native:
	@$(MAKE) -s -C native

# A wheel with the native parts built in (setup.py compiles native/ into it), for
# `pipx install dist/mallocbench-*.whl` on a host without a checkout.
dist: venv
	$(VENV)/bin/uv build --wheel --out-dir dist .

# The shim where a hardened service (ProtectHome=true) can load it; the same copy as
# `mallocbench install-shim --prefix $(PREFIX)`.
install: native
	install -D -m 0644 native/build/libmbrecord.so $(PREFIX)/lib/mallocbench/libmbrecord.so
	@echo $(PREFIX)/lib/mallocbench/libmbrecord.so

# The site in docs/ (mkdocs.yml), warnings as errors: a broken link or anchor, a page
# left out of the nav, a reference table whose code moved (scripts/mkdocs_hooks.py).
# Not --quiet: it hides the warnings that --strict counts, and the build passes anyway.
# NO_MKDOCS_2_WARNING silences Material's notice about its successor, printed every build.
SITE ?= site
docs: venv
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(SITE)

# The project's own modules, compiled ahead for the same reason as the venv's (another
# 0.7 s a process, hundreds of processes in `make test`); only changed files are redone.
bytecode: venv
	@$(PY) -m compileall -q -j 0 src

demo: setup
	$(VENV)/bin/mallocbench run $(EXPERIMENT) --out $(OUT)
	@echo
	@echo "Report: $(OUT)/report.html and $(OUT)/report.md  (results: $(OUT)/results.json)"

# mypy runs beside pytest at idle priority: it takes the CPU the tests leave idle (server
# starts, sleeps) instead of a minute of its own, and its verdict is awaited at the end.
# The --help bench runs first, with nothing beside it, since it times.
test: setup
	@bash scripts/install-deps.sh chromium systemd postgresql-15
	$(VENV)/bin/ruff check src tests bench
	$(PY) bench/bench_help.py
	$(MAKE) -s docs SITE=$(VENV)/site
	@nice -n 19 $(VENV)/bin/mypy src tests bench > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	  $(PY) -m pytest -q --durations=20 -n $(TEST_WORKERS) $(DIST) $(TESTS); tests=$$?; \
	  wait $$mypy; typed=$$?; \
	  echo "mypy src tests bench:"; cat $(VENV)/mypy.log; \
	  exit $$(( tests || typed ))

lint: venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy src tests bench

# --help within 0.3 s of a bare interpreter (medians of 10); exits 1 when slower.
bench-help: venv
	$(PY) bench/bench_help.py

clean:
	rm -rf $(VENV) $(VENV)-lock $(OUT) native/build .pytest_cache .mypy_cache build dist site
