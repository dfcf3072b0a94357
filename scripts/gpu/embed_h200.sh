#!/usr/bin/env bash
# NOT YET RUN: written in session 8, which had no device time left. Issue 14's H200 point through the product's
# own commands: a random-weight Qwen3-Embedding-0.6B shape (config + Qwen3 tokenizer + its query prompt, carried in
# .gpu/qwen3-embedding) -> tune --device cuda --quick on mixed-length texts up to 512 tokens -> serve the artifact
# -> bench at concurrency 64 on the same texts -> the forward-only ceiling on the same texts (target: served >= 70%).
# Run: device tool, carry [".whl", ".gpu"], command `bash scripts/gpu/embed_h200.sh`.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
I="python3 -m infertune.cli.main"; M=/tmp/Qwen3-Embedding-0.6B; S=${SECONDS_PER_POINT:-15}
rm -rf $M && cp -r .gpu/qwen3-embedding $M
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; nproc
python3 - "$M" <<'PY'
import json, sys
from transformers import AutoTokenizer
from infertune.workload import load_workload
tok = AutoTokenizer.from_pretrained(sys.argv[1]); items = load_workload(None).items
keep = [t for t in items if len(tok(t)["input_ids"]) <= 512]
open("/tmp/texts512.jsonl", "w").write("".join(json.dumps({"input": t}) + "\n" for t in keep))
print(f"{len(keep)} of {len(items)} sample texts are <= 512 tokens")
PY
/usr/bin/time -f "tune wall %e s" $I tune $M --device cuda --quick --workload /tmp/texts512.jsonl --out /tmp/tq --json > "$OUT/tune.json"
echo "tune exit $?"
$I serve /tmp/tq/artifact --device cuda --port 8000 --max-queue 4096 2> "$OUT/serve.log" &
SRV=$!
for _ in $(seq 1 300); do curl -sf localhost:8000/ready > /dev/null && break; sleep 1; done
$I bench http://127.0.0.1:8000 --workload /tmp/texts512.jsonl --concurrency 64 --workers 4 --duration $S --warmup 3 --out /tmp/b64 2>&1 | tail -3
cp /tmp/b64/bench.json "$OUT/bench_c64.json"
kill -TERM $SRV; wait $SRV; echo "serve exit $?"
$I serve /tmp/tq/artifact --device cuda --ceiling --workload /tmp/texts512.jsonl --json > "$OUT/ceiling.json"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
t = json.load(open(f"{out}/tune.json")); w = t.get("winner") or {}
c = json.load(open(f"{out}/ceiling.json")); p = json.load(open(f"{out}/bench_c64.json"))["points"][0]
print(f"\ntune winner {w.get('name')}: {w.get('items_per_s')} items/s in tune, wall {t.get('wall_s')} s")
print("| point | items/s | P50 ms | P99 ms | valid | vs ceiling |\n|---|---:|---:|---:|---|---:|")
print(f"| serve c=64 | {p['achieved_rps']:,.0f} | {p['latency_ms']['p50']} | {p['latency_ms']['p99']} | {p['valid']} | "
      f"{p['achieved_rps'] / c['items_per_s']:.0%} |")
print(f"| ceiling | {c['items_per_s']:,.0f} (n={c['n']}, {c['min']:,.0f}-{c['max']:,.0f}) | | | | 100% |")
PY
