# The two commands a new user runs: `make demo` and `make test`. Each sets up .venv itself.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench docs clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev,dashboard,docs,metrics,proxy,share]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kubemux demo

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench docs/_ext
	$(BIN)/ruff format --check src tests examples bench docs/_ext

typecheck: $(STAMP)
	$(BIN)/mypy

# Three workers: most tests wait on sockets and processes, so even two cores run three at once.
# worksteal: an idle worker takes tests queued for a busy one, so a few long files do not end
# the run on one worker.
pytest: $(STAMP)
	$(BIN)/python -m pytest -n 3 --dist worksteal

# the documentation site into site/ (tests/test_docs.py builds it too, so a broken page fails CI)
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/event_churn.py
	$(BIN)/python bench/context_churn.py
	$(BIN)/python bench/scale_contexts.py
	$(BIN)/python bench/soak_informer.py
	$(BIN)/python bench/storm.py
	$(BIN)/python bench/hostile.py
	$(BIN)/python bench/hostile_sse.py
	$(BIN)/python bench/credentials.py
	$(BIN)/python bench/table.py
	$(BIN)/python bench/share.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache site
