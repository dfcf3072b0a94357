#!/usr/bin/env bash
# On a GPU host whose image lacks the extras: tests/gpu/test_serve_cuda.py (serve --device cuda runs the one batch
# core in both topologies), with the wheels and MiniLM that scripts/gpu/carry.sh puts in .whl and .gpu/minilm.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1
[ -d /tmp/minilm ] || python3 scripts/gpu/restore_minilm.py /tmp/minilm || exit 1
INFERTUNE_TEST_MINILM=/tmp/minilm python3 -m pytest -q -p no:cacheprovider tests/gpu/test_serve_cuda.py 2>&1 | tail -15
