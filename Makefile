# The two set-up commands of the README. Both create ./.venv on first use.
#   make demo   ingest the sample corpus into SQLite and print the duplicate pairs
#   make test   install the test tools and run the whole suite
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test lint

$(BIN)/simindex: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(BIN)/simindex
	rm -f demo.db demo.db-wal demo.db-shm
	$(BIN)/simindex ingest examples/news.jsonl --db demo.db
	$(BIN)/simindex pairs --db demo.db

test: $(BIN)/simindex
	$(BIN)/python -m pytest

lint: $(BIN)/simindex
	$(BIN)/ruff check simindex migrations tests benchmarks docs
	$(BIN)/ruff format --check simindex migrations tests benchmarks docs
