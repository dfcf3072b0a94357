#!/usr/bin/env bash
# The random-weight Qwen3-Embedding-0.6B shape and its long-tail workload, for the GPU benchmarks: MODEL_DIR WORKLOAD
# (tokenizer from $TOKENIZER, default .gpu/tokenizer: tokenizer_config.json and tokenizer.json.xz)
set -euo pipefail
M=${1:-/tmp/Qwen3-Embedding-0.6B-shape}; W=${2:-/tmp/qwen3_workload.jsonl}; T=${TOKENIZER:-.gpu/tokenizer}
rm -rf "$M"; mkdir -p "$M"; cp tests/unit/configs/qwen3-0.6b.json "$M/config.json"
cp "$T/tokenizer_config.json" "$M/"; xz -dc "$T/tokenizer.json.xz" > "$M/tokenizer.json"
${PY:-python3} benchmarks/gpu/long_tail_workload.py "$M" "$W"
