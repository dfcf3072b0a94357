#!/usr/bin/env bash
# GPU embeddings through the product's own commands: tune -> serve the artifact (cold start, then a warm-cache
# restart) -> bench at 32 inputs per request -> the forward-only ceilings of the artifact and of the same weights
# run eagerly in bf16, side by side in one run; a table last.
#
# Usage: benchmarks/gpu/embed_compiled.sh qwen3|minilm [tune flags...]
#   qwen3: a random-weight Qwen3-Embedding-0.6B shape (tests/unit/configs/qwen3-0.6b.json and a BPE tokenizer from
#          $TOKENIZER, default .gpu/tokenizer) on a mixed workload with a long tail (p99 >= 700 tokens)
#   minilm: all-MiniLM-L6-v2 ($MINILM, default: restored from .gpu/minilm) on the sample workload
# Env: OUT (results folder, default /tmp/out), CONC (bench concurrencies, default 8,32), SECONDS_PER_POINT (15), SKIP_SERVE=1, WHEELS (a folder of wheels to
# install first, for a GPU image that lacks the [torch,serve,bench,report,gpu] extras).
set -uo pipefail
WHICH=${1:?qwen3 or minilm}; shift
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=${SECONDS_PER_POINT:-10}
if [ -d "${WHEELS:-.whl}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHEELS:-.whl}"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PY:-python3}; I="$PY -m infertune.cli.main"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,temperature.gpu --format=csv,noheader
$PY -c "import torch, transformers, importlib.metadata as m; print('torch', torch.__version__, 'transformers', transformers.__version__, 'torchao', m.version('torchao'))"
W=/tmp/${WHICH}_workload.jsonl
if [ "$WHICH" = qwen3 ]; then
  M=/tmp/Qwen3-Embedding-0.6B-shape; rm -rf $M; mkdir -p $M; cp tests/unit/configs/qwen3-0.6b.json $M/config.json
  T=${TOKENIZER:-.gpu/tokenizer}; cp $T/tokenizer_config.json $M/; xz -dc $T/tokenizer.json.xz > $M/tokenizer.json
  $PY benchmarks/gpu/long_tail_workload.py $M $W || exit 1
else
  M=${MINILM:-/tmp/minilm}; [ -d $M ] || $PY scripts/gpu/restore_minilm.py $M || exit 1
  cp src/infertune/data/sample_embeddings.jsonl $W
fi
TUNE=/tmp/tune_$WHICH; rm -rf $TUNE
/usr/bin/time -f "tune wall %e s" $I tune $M --device cuda --workload $W --out $TUNE --json "$@" > "$OUT/tune_$WHICH.json"
echo "tune exit $?"; cp $TUNE/report.html "$OUT/report_$WHICH.html" 2>/dev/null
[ -d $TUNE/artifact ] || { echo "no artifact"; exit 1; }
ls -la $TUNE/artifact | head; ART=$TUNE/artifact
serve_once() {  # $1 tag: start serve, time /ready and the first answer, then bench 32 inputs per request
  local t0 t1; t0=$(date +%s%N)
  $I serve $ART --device cuda --truncate --port 8000 --max-queue 4096 2> "$OUT/serve_$1.log" &
  SRV=$!
  for _ in $(seq 1 300); do curl -sf localhost:8000/ready > /dev/null && break; sleep 0.5; done
  curl -sf localhost:8000/v1/embeddings -H 'content-type: application/json' -d '{"input": ["hello"], "model": "x"}' > /dev/null
  t1=$(date +%s%N); echo "$1 first answer after $(( (t1 - t0) / 1000000 )) ms" | tee -a "$OUT/start.txt"
  if [ "$1" = warm ]; then grep -h "compiled in\|captured" "$OUT/serve_$1.log" | head -3
    $I bench http://127.0.0.1:8000 --workload $W --inputs-per-request 32 --concurrency ${CONC:-8,32} --workers 4 --duration $S --warmup 3 --ceiling "$OUT/ceiling_art_$WHICH.json" --out /tmp/b32 2>&1 | tail -3
    cp /tmp/b32/bench.json "$OUT/bench32_$WHICH.json"
  fi
  kill -TERM $SRV; wait $SRV
}
if [ -z "${SKIP_SERVE:-}" ]; then
  [ -n "${FRESH_CACHE:-}" ] && TORCHINDUCTOR_CACHE_DIR=/tmp/fresh_inductor serve_once fresh  # only the artifact's kernels
  $I serve $ART --device cuda --ceiling --workload $W --json > "$OUT/ceiling_art_$WHICH.json"
  serve_once warm   # inductor's cache as the tune left it
  # the same weights run eagerly in bf16: the engine the compiled one is measured against
  E=/tmp/eager_art; rm -rf $E; cp -r $ART $E; rm -f $E/compile_cache.bin
  $PY - $E/manifest.json <<'PY'
import json, sys
p = sys.argv[1]; m = json.load(open(p)); c = m["candidate"]
c.update(backend="torch-eager", precision="bf16", quant=None, keep_high=[], options=[o for o in c["options"] if o[0] == "batches"])
m["candidate_id"] = "torch-eager/bf16"; json.dump(m, open(p, "w"))
PY
  $I serve $E --device cuda --ceiling --workload $W --json > "$OUT/ceiling_eager_$WHICH.json"
fi
$PY benchmarks/gpu/embed_table.py "$OUT" "$WHICH"
