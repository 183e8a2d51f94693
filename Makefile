# The two commands of a fresh clone: `make train` and `make test`. Each creates .venv on first use.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
ARGS    ?=

.PHONY: train test test-all demo lint bench rename clean

$(BIN)/brisk-train: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	@touch $@

$(VENV)/.dev: $(BIN)/brisk-train
	$(BIN)/pip install -q -e '.[dev,plots,export,search,timm,loggers]'
	@touch $@

train: $(BIN)/brisk-train  ## train on CIFAR-10 (downloads it once into data/)
	$(BIN)/brisk-train $(ARGS)

demo: $(BIN)/brisk-train  ## short offline run on generated data
	$(BIN)/brisk-train experiment=quickstart $(ARGS)

test: $(VENV)/.dev  ## the test suite (CPU only), on two worker processes
# Two workers, since most of the suite waits on process starts and imports (~4.5 s of torch and Lightning each), each
# on one torch thread (tests/conftest.py). On the 2-core VM: 872 s in one process at 35f06ad, 666 s on two workers of
# two threads, 488 s on two of one (504 to 623 s from fresh clones). Each worker makes its own session fixtures.
	$(BIN)/pytest -q -n 2 --durations=15 $(ARGS)

test-all: $(VENV)/.dev  ## also the tests marked slow (those alone, pytest -m slow: 470 s on the two workers, 646 s in one)
	$(BIN)/pytest -q -n 2 -m '' $(ARGS)

$(VENV)/.plots: $(BIN)/brisk-train
	$(BIN)/pip install -q -e '.[plots]'
	@touch $@

# brisk-bench comes with the speed lab: a project that removed the lab has no such script.
bench: $(VENV)/.plots  ## the speed lab: tables and plots in logs/bench/ (ARGS=preset=quick: every part, smaller)
	@test -x $(BIN)/brisk-bench || { echo "make bench: this project has no speed lab (brisk-bench is not installed)" >&2; exit 2; }
	$(BIN)/brisk-bench $(ARGS)

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts

# NAME reaches the script verbatim, through the environment: in the recipe's text make would expand $(...) in it
# and the shell would run its quotes, `;` and backquotes; after `--` a name such as --help is still the name. A
# refused name stops make here, with the status of the script.
# The installed package keeps the old name: uninstall it so the next make installs the new one.
rename: override export NAME := $(value NAME)
rename:  ## make the clone your own project: make rename NAME=<new_name>
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY)) scripts/rename.py -- "$$NAME"
	@if [ -x $(BIN)/pip ]; then $(BIN)/pip uninstall -q -y brisk; rm -f $(VENV)/.dev $(VENV)/.plots; fi

clean:
	rm -rf $(VENV) logs .pytest_cache
