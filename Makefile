# The two set-up commands of the README. Both create ./.venv on first use.
#   make demo   install simindex (no extras) and deduplicate the sample corpus on SQLite
#   make test   install the test tools and run the whole suite
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test lint docs package-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	@echo "Installing simindex into $(VENV) (no extras)..."
	$(BIN)/python -m pip install --progress-bar on -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	@echo "Installing simindex with the test, Spark, report and docs tools into $(VENV)..."
	$(BIN)/python -m pip install --progress-bar on -e '.[test]'
	touch $@

demo: $(VENV)/.demo-installed
	rm -f news.db news.db-wal news.db-shm news.dedup.jsonl news.dedup.jsonl.dropped.csv
	$(BIN)/simindex dedup examples/news.jsonl -o news.dedup.jsonl --db news.db
	head -3 news.dedup.jsonl.dropped.csv
	$(BIN)/simindex query --db news.db --id n001
	@echo
	@echo "simindex is installed in $(VENV): run '$(BIN)/simindex --help',"
	@echo "or 'source $(BIN)/activate' and then 'simindex --help'."

test: $(VENV)/.test-installed
	$(BIN)/python -m pytest

lint: $(VENV)/.test-installed
	$(BIN)/ruff check simindex migrations tests benchmarks docs
	$(BIN)/ruff format --check simindex migrations tests benchmarks docs
	$(BIN)/lint-imports

docs: $(VENV)/.test-installed
	$(BIN)/python docs/make_cli_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(VENV)/site

# Builds the wheel and installs it, with its dependencies only, into a fresh virtual
# environment, then deduplicates the sample corpus from outside the checkout.
package-check: $(VENV)/.test-installed
	rm -rf $(VENV)/package-check && mkdir -p $(VENV)/package-check
	$(BIN)/python -m pip wheel --no-deps -q -w $(VENV)/package-check .
	$(PYTHON) -m venv $(VENV)/package-check/venv
	$(VENV)/package-check/venv/bin/python -m pip install -q $(VENV)/package-check/simindex-*.whl
	cd $(VENV)/package-check && venv/bin/simindex dedup $(CURDIR)/examples/news.jsonl -o kept.jsonl
	test "$$(wc -l < $(VENV)/package-check/kept.jsonl)" -gt 0
	$(VENV)/package-check/venv/bin/python -c "import simindex, pathlib; assert (pathlib.Path(simindex.__file__).parent / 'py.typed').exists()"
