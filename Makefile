PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-faults bench lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,dev,postgres,web,otel]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/refunds/demo.py

# The web page tests drive Debian's chromium through Playwright (never `playwright install`).
$(VENV)/.chromium: | $(BIN)/python
	command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)
	touch $@

test: $(STAMP) $(VENV)/.chromium
	$(BIN)/python -m pytest -q

test-faults: $(STAMP)
	$(BIN)/python -m pytest -q -m faults tests/faults

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# mypy reads [tool.mypy] in pyproject.toml: --strict on src/tether, check_untyped_defs on tests.
lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
