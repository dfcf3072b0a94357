#!/usr/bin/env bash
# Issue 14's H200 point through the product's own commands: a random-weight Qwen3-Embedding-0.6B shape (config +
# Qwen3 tokenizer + its query prompt, carried in .gpu/qwen3-embedding) -> tune --device cuda --quick on mixed-length
# texts up to 512 tokens -> serve the artifact -> bench at concurrency 64 on the same texts -> the forward-only
# ceiling on the same texts (target: served >= 70%).
# Run: device tool, carry [".whl", ".gpu"], command `bash scripts/gpu/embed_h200.sh`.
# Dry run here: DEVICE=cpu MODEL=/tmp/tinyq SECONDS_PER_POINT=4 bash scripts/gpu/embed_h200.sh (a tiny Qwen3 config)
# Session 9's first run found: the naive baseline mean-pooled the decoder (cos 0.925), the compile probe ate the
# budget before eager fp16 started, and the device's own typer did not know bench's --duration (typer/click are now
# carried in .whl).
set -uo pipefail
DEV=${DEVICE:-cuda}; S=${SECONDS_PER_POINT:-15}
if [ "$DEV" = cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH
  PY=python3
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
else
  PY=${PY:-.venv/bin/python}
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
I="$PY -m infertune.cli.main"; M=/tmp/embed_model; TUNE=/tmp/embed_tune
rm -rf $M $TUNE /tmp/b64_* && cp -r "${MODEL:-.gpu/qwen3-embedding}" $M
nproc; $PY -c "import typer, click, torch, transformers; print('typer', typer.__version__, 'click', click.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
$PY - "$M" <<'PY'
import json, sys
from transformers import AutoTokenizer
from infertune.workloads.texts import load_workload
tok = AutoTokenizer.from_pretrained(sys.argv[1]); items = load_workload(None).items
keep = [t for t in items if len(tok(t)["input_ids"]) <= 512]
open("/tmp/texts512.jsonl", "w").write("".join(json.dumps({"input": t}) + "\n" for t in keep))
print(f"{len(keep)} of {len(items)} sample texts are <= 512 tokens")
PY
/usr/bin/time -f "tune wall %e s" $I tune $M --device $DEV --quick --workload /tmp/texts512.jsonl --out $TUNE --json > "$OUT/tune.json"
echo "tune exit $?"
[ -d $TUNE/artifact ] || { echo "no artifact: stopping"; exit 1; }
[ "$DEV" = cuda ] && { [ -d /tmp/minilm ] || $PY scripts/gpu/restore_minilm.py /tmp/minilm; INFERTUNE_TEST_MINILM=/tmp/minilm $PY -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_graphs.py -s 2>&1 | grep -E "^E |MiniLM|packed|passed|failed|Error" | head -30; }
# Modes side by side in this run (MODES, default "padded auto"): a CUDA-graph mode (padded batches, or auto =
# packed ones for a decoder), optionally +waitMS for an explicit --max-wait-ms. Each: served c=64; the
# forward-only ceiling once per graph mode.
for G in ${MODES:-padded auto}; do
  GM=${G%%+*}; EXTRA=""; case $G in *+wait*) EXTRA="--max-wait-ms ${G##*+wait}";; esac
  $I serve $TUNE/artifact --device $DEV --port 8000 --max-queue 4096 --cuda-graphs $GM $EXTRA 2> "$OUT/serve_$G.log" &
  SRV=$!
  for _ in $(seq 1 300); do curl -sf localhost:8000/ready > /dev/null && break; sleep 1; done
  $I bench http://127.0.0.1:8000 --workload /tmp/texts512.jsonl --concurrency 64 --workers 4 --duration $S --warmup 5 --out /tmp/b64_$G 2>&1 | tail -2
  cp /tmp/b64_$G/bench.json "$OUT/bench_c64_$G.json"
  kill -TERM $SRV; wait $SRV; echo "serve ($G) exit $?"; grep -h "engine" "$OUT/serve_$G.log" | tail -4
  [ -f "$OUT/ceiling_$GM.json" ] || $I serve $TUNE/artifact --device $DEV --ceiling --workload /tmp/texts512.jsonl --cuda-graphs $GM --json > "$OUT/ceiling_$GM.json"
done
$PY - "$OUT" ${MODES:-padded auto} <<'PY'
import json, sys
out, modes = sys.argv[1], sys.argv[2:]
t = json.load(open(f"{out}/tune.json")); w = t.get("winner") or {}; b = t.get("baseline") or {}
print(f"\ntune winner {w.get('name')}: {w.get('items_per_s')} items/s in tune, naive {b.get('items_per_s')} "
      f"(cos {(b.get('accuracy') or {}).get('cosine_mean')}), wall {t.get('wall_s')} s")
print("| mode | served c=64 items/s | P50 ms | P99 ms | valid | ceiling items/s (n, range) | served / ceiling |")
print("|---|---:|---:|---:|---|---:|---:|")
for g in modes:
    c = json.load(open(f"{out}/ceiling_{g.split('+')[0]}.json")); p = json.load(open(f"{out}/bench_c64_{g}.json"))["points"][0]
    print(f"| {g} | {p['achieved_rps']:,.0f} | {p['latency_ms']['p50']} | {p['latency_ms']['p99']} | {p['valid']} | "
          f"{c['items_per_s']:,.0f} (n={c['n']}, {c['min']:,.0f}-{c['max']:,.0f}) | {p['achieved_rps'] / c['items_per_s']:.0%} |")
for g in sorted({m.split('+')[0] for m in modes}):
    c = json.load(open(f"{out}/ceiling_{g}.json"))
    print(f"ceiling {g}: packed {c.get('packed')}, {c['batches']} batches of {c['items_per_batch_mean']} items, "
          f"budget {c['budget_tokens']}, graphs {c.get('cuda_graphs')}")
PY
