#!/usr/bin/env bash
# NOT YET RUN: written in session 8, when the session had no device time left (131 s).
# On the lent H200: where does `infertune serve` spend its time under load? tune (quick) -> serve (default
# frontends, one GPU) -> for each bench point (1 input/request c=256; 32 inputs/request c=32): while the bench
# runs, py-spy samples the engine and one frontend for 8 s and nvidia-smi samples GPU utilisation; then the
# top frames of each (self and inclusive, share of the samples) and every process's CPU share.
# Env: SKIP_TUNE=1 (serve the untuned fp32 model), EXTRA_SERVE (more serve flags).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
[ -d /tmp/minilm ] || python3 .gpu/restore.py /tmp/minilm || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
I="python3 -m infertune.cli.main"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; nproc
ART=/tmp/minilm
if [ -z "${SKIP_TUNE:-}" ]; then
  /usr/bin/time -f "tune wall %e s" $I tune /tmp/minilm --device cuda --quick --out /tmp/tunerun --json > "$OUT/tune.json"
  echo "tune exit $?"; ART=/tmp/tunerun/artifact
  python3 -c "import json,sys; w=json.load(open(sys.argv[1])).get('winner') or {}; print('tune winner:', w.get('name'), w.get('items_per_s'))" "$OUT/tune.json"
fi
$I serve $ART --device cuda --devices 0 --truncate --port 8000 --max-queue 4096 ${EXTRA_SERVE:-} 2> "$OUT/serve.log" &
SRV=$!
for _ in $(seq 1 240); do curl -sf localhost:8000/ready > /dev/null && break; sleep 1; done
curl -s localhost:8000/ready | head -c 300; echo
ENG=""; FE=""
for c in $(pgrep -P $SRV); do
  d=$(py-spy dump --pid $c 2>/dev/null)
  if echo "$d" | grep -q batch_core; then ENG=$c; elif echo "$d" | grep -q uvicorn; then FE=${FE:-$c}; fi
done
echo "serve $SRV engine $ENG frontend $FE children $(pgrep -P $SRV | wc -l)"
for point in "c256:--concurrency 256" "b32:--inputs-per-request 32 --concurrency 32"; do
  name=${point%%:*}
  $I bench http://127.0.0.1:8000 ${point#*:} --workers 4 --duration 20 --warmup 3 --out /tmp/bench_$name > /tmp/bench_$name.log 2>&1 &
  B=$!
  sleep 9
  py-spy record --pid $ENG -d 8 -r 250 --nonblocking --format raw -o /tmp/eng_$name.txt > /dev/null 2>&1 &
  P1=$!
  py-spy record --pid $FE -d 8 -r 250 --nonblocking --format raw -o /tmp/fe_$name.txt > /dev/null 2>&1 &
  P2=$!
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 500 > /tmp/gpu_$name.txt &
  NS=$!
  sleep 3; top -b -n 1 -w 200 | head -40 > /tmp/top_$name.txt
  wait $P1 $P2; sleep 6; kill $NS
  wait $B; tail -2 /tmp/bench_$name.log
  cp /tmp/bench_$name/bench.json "$OUT/bench_$name.json"
  python3 - "$name" <<'PY'
import collections, sys
name = sys.argv[1]
def summary(path, label):
    self_c, incl, total = collections.Counter(), collections.Counter(), 0
    for line in open(path):
        stack, _, n = line.rstrip().rpartition(" ")
        n = int(n); total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")" for f in stack.split(";") if f]
        if frames: self_c[frames[-1]] += n
        for f in set(frames): incl[f] += n
    print(f"\n{label}: {total} non-idle samples in 8 s at 250/s = {total / 2000:.0%} of one core busy")
    print("  self:", "; ".join(f"{f} {c / total:.0%}" for f, c in self_c.most_common(12)))
    print("  incl:", "; ".join(f"{f} {c / total:.0%}" for f, c in incl.most_common(25)))
for who in ("eng", "fe"):
    try: summary(f"/tmp/{who}_{name}.txt", f"{name} {who}")
    except Exception as e: print(who, "no profile:", e)
g = [float(x) for x in open(f"/tmp/gpu_{name}.txt").read().split() if x.strip().replace('.', '').isdigit()]
print(f"{name} GPU util samples {g}")
print(open(f"/tmp/top_{name}.txt").read())
PY
done
kill -TERM $SRV; wait $SRV; echo "serve exit $?"
CUDA_VISIBLE_DEVICES=0 $I serve $ART --device cuda --ceiling --json > "$OUT/ceiling.json"; tail -c 600 "$OUT/ceiling.json"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]; c = json.load(open(f"{out}/ceiling.json"))
print("\n| point | req/s | items/s | P50 ms | P99 ms | valid | vs ceiling |\n|---|---:|---:|---:|---:|---|---:|")
for name, per in (("c256", 1), ("b32", 32)):
    for p in json.load(open(f"{out}/bench_{name}.json"))["points"]:
        r, l = p["achieved_rps"], p["latency_ms"]
        print(f"| {name} c={p['offered']['concurrency']} | {r:,.0f} | {r * per:,.0f} | {l.get('p50')} | {l.get('p99')} | {p['valid']} | {r * per / c['items_per_s']:.0%} |")
print(f"| ceiling | | {c['items_per_s']:,.0f} (n={c['n']}, {c['min']:,.0f}-{c['max']:,.0f}, budget {c['budget_tokens']}, {c['items_per_batch_mean']} items/batch, {c['tokens_per_item_mean']} tok/item) | | | | |")
PY
