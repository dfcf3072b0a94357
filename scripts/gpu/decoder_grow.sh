#!/usr/bin/env bash
# On the lent H200: does capping a window's batches at the CUDA graphs (serve/batch_core.grown_budget, session 13) cost
# a decoder embedder, whose eager batches are GPU-bound? A random-weight Qwen3-Embedding-0.6B shape (Qwen3-0.6B's
# config with MiniLM's tokenizer beside it: speed only, the ids are BERT's), served untuned with packed graphs, side
# by side: the default (capped) and INFERTUNE_GROW_PAST_GRAPHS=1; bench at concurrency 64, 1 text per request, then
# the forward-only ceiling. Carry [".whl", ".gpu"] (scripts/gpu/carry.sh). The table is printed last.
# Dry run here: DEVICE=cpu LAYERS=2 HIDDEN=64 S=4 bash scripts/gpu/decoder_grow.sh
set -uo pipefail
DEV=${DEVICE:-cuda}; S=${S:-15}
if [ "$DEV" = cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH; PY=python3
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
else
  PY=${PY:-.venv/bin/python}
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 INFERTUNE_CACHE=/tmp/itcache
OUT=${OUT:-/tmp/out}; R=/tmp/dres; rm -rf $R /tmp/q3; mkdir -p "$OUT" $R /tmp/q3
I="$PY -m infertune.cli.main"
cp .gpu/minilm/tokenizer.json .gpu/minilm/tokenizer_config.json .gpu/minilm/special_tokens_map.json .gpu/minilm/vocab.txt /tmp/q3/
$PY - <<PY
import json
c = json.load(open("tests/unit/configs/qwen3-0.6b.json"))
if "${LAYERS:-}": c.update(num_hidden_layers=int("${LAYERS:-0}"), hidden_size=int("${HIDDEN:-64}"), intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
json.dump(c, open("/tmp/q3/config.json", "w"))
PY
for V in default INFERTUNE_GROW_PAST_GRAPHS=1; do
  E=""; [ "$V" != default ] && E=$V; G=${V//=/-}
  env $E $I serve /tmp/q3/config.json --task embed --device $DEV --port 8000 --max-queue 4096 --truncate 2> $R/serve_$G.log &
  SRV=$!
  for _ in $(seq 1 400); do curl -sf localhost:8000/ready > /dev/null && break; kill -0 $SRV 2> /dev/null || break; sleep 1; done
  curl -s localhost:8000/ready | $PY -c "import json,sys; r=json.load(sys.stdin); print('$G ready:', r.get('settings'))"
  $I bench http://127.0.0.1:8000 --concurrency 64 --workers 4 --duration $S --warmup 5 --out /tmp/b_$G > $R/bench_$G.log 2>&1
  cp /tmp/b_$G/bench.json $R/bench_$G.json
  kill -TERM $SRV; wait $SRV; echo "serve $G exit $?"; grep -h "^engine" $R/serve_$G.log | tail -2 | cut -c1-400
done
$I serve /tmp/q3/config.json --task embed --device $DEV --ceiling --json > $R/ceiling.json 2> $R/ceiling.log
tar czf $OUT/dres.tgz -C $R .
$PY - $R <<'PY'
import json, sys
R = sys.argv[1]
c = json.load(open(f"{R}/ceiling.json"))
print("\n| variant | c=64 items/s | P50 ms | P99 ms | n | valid | vs ceiling |\n|---|---:|---:|---:|---:|---|---:|")
for g in ("default", "INFERTUNE_GROW_PAST_GRAPHS-1"):
    try:
        p = json.load(open(f"{R}/bench_{g}.json"))["points"][0]
    except Exception as e:  # noqa: BLE001
        print(g, "no bench:", e); continue
    l = p["latency_ms"]
    print(f"| {g} | {p['achieved_rps']:,.0f} | {l['p50']:.1f} | {l['p99']:.1f} | {p['n']} | {p['valid']} | {p['achieved_rps'] / c['items_per_s']:.0%} |")
print(f"| ceiling | {c['items_per_s']:,.0f} (n={c['n']}, {c['min']:,.0f}-{c['max']:,.0f}; budget {c.get('budget_tokens')}) | | | | | |")
PY
