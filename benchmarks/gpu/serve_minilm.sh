#!/usr/bin/env bash
# MiniLM served on one or more GPUs through the product's own commands: tune (quick) -> serve with N frontends ->
# bench at 1 input/request c=256 and 32 inputs/request c=32 -> the forward-only ceiling, on the same texts; a table
# last (each point's items/s as a share of the ceiling).
# Usage: benchmarks/gpu/serve_minilm.sh [DEVICE_SETS] [FRONTENDS]   e.g. serve_minilm.sh 0 8 ; serve_minilm.sh "0 0,1"
# (one serve per device set, side by side in one run; FRONTENDS empty = the product's default)
# Env: OUT (results folder, default /tmp/out), SECONDS_PER_POINT (15), SKIP_TUNE=1 (serve the untuned fp32 model),
# DEVICE=cpu (a dry run without a GPU), GRAPHS (serve --cuda-graphs modes side by side, e.g. "auto off"; MODE+waitMS
# adds --max-wait-ms MS, e.g. "auto auto+wait0"; the ceiling uses the first mode), ART (serve this artifact when
# SKIP_TUNE=1), SRC (run the product from this src/ folder instead of the checkout's: another commit's code, side by
# side). With a .whl folder (scripts/gpu/carry.sh) its wheels are installed first and MiniLM is restored from .gpu/.
set -uo pipefail
if [ -d .whl ] && [ "${DEVICE:-cuda}" = cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${SRC:-$PWD/src}
  PY=python3
  [ -d /tmp/minilm ] || python3 scripts/gpu/restore_minilm.py /tmp/minilm || exit 1
  MODEL=/tmp/minilm
else
  PY=${PY:-.venv/bin/python}; MODEL=minilm
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
DEV=${DEVICE:-cuda}; SETS=${1:-0}; FE=${2:-}; S=${SECONDS_PER_POINT:-15}
I="$PY -m infertune.cli.main"
[ "$DEV" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
nproc
ART=${ART:-$MODEL}
if [ -z "${SKIP_TUNE:-}" ]; then
  /usr/bin/time -f "tune wall %e s" $I tune $MODEL --device $DEV --quick --out /tmp/tunerun --json > "$OUT/tune.json"
  echo "tune exit $?"; ART=/tmp/tunerun/artifact
  $PY - "$OUT/tune.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); w = r.get("winner") or {}
print("tune winner:", w.get("name"))
EOF
fi
for DEVICES in $SETS; do
for G in ${GRAPHS:-auto}; do
GM=${G%%+*}; WAIT=""; case $G in *+wait*) WAIT="--max-wait-ms ${G##*+wait}";; esac
TAG=${DEVICES//,/-}_${G//+/-}
DEVFLAG=""; [ "$DEV" = cuda ] && DEVFLAG="--device cuda --devices $DEVICES"
$I serve $ART $DEVFLAG ${FE:+--frontends $FE} --truncate --port 8000 --max-queue 4096 --cuda-graphs $GM $WAIT ${EXTRA_SERVE:-} 2> "$OUT/serve_$TAG.log" &
SRV=$!
for _ in $(seq 1 240); do curl -sf localhost:8000/ready > /dev/null && break; sleep 1; done
curl -s localhost:8000/ready | head -c 300; echo
curl -s localhost:8000/ready | $PY -c "import json, sys; w = json.load(sys.stdin).get('worker') or {}; print('ready worker:', w.get('mode'), w.get('batch_core'))"
for point in "c256:--concurrency 256" "b32:--inputs-per-request 32 --concurrency 32"; do
  name=${point%%:*}_$TAG; mkdir -p /tmp/bench_$name "$OUT/bench_$name"
  $I bench http://127.0.0.1:8000 ${point#*:} --workers 4 --duration $S --warmup 3 --out /tmp/bench_$name 2>&1 | tail -3
  cp /tmp/bench_$name/bench.json "$OUT/bench_$name/"   # only the JSON is kept: the results folder stays a few files
done
kill -TERM $SRV; wait $SRV; echo "serve exit $?"; tail -2 "$OUT/serve_$TAG.log"
done
done
CUDA_VISIBLE_DEVICES=0 $I serve $ART ${DEV:+--device $DEV} --ceiling --cuda-graphs $(echo ${GRAPHS:-auto} | cut -d" " -f1 | cut -d+ -f1) --json > "$OUT/ceiling.json"
$PY - "$OUT" "$SETS" "${GRAPHS:-auto}" <<'EOF'
import json, sys
out, sets, graphs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
c = json.load(open(f"{out}/ceiling.json"))
f = lambda v: "n/a" if v is None else f"{v:.1f}"
print(f"\n| point | req/s | items/s | P50 ms | P99 ms | valid | vs ceiling |\n|---|---:|---:|---:|---:|---|---:|")
for name, per, devs in [(f"bench_{k}_{d.replace(',', '-')}_{g.replace('+', '-')}", p, f"{d}, graphs {g}") for d in sets for g in graphs
                        for k, p in (("c256", 1), ("b32", 32))]:
    b = json.load(open(f"{out}/{name}/bench.json"))
    for p in b["points"]:
        rps, lat = p["achieved_rps"], p["latency_ms"]
        print(f"| {name} c={p['offered']['concurrency']} (devices {devs}) | {rps:,.0f} | {rps * per:,.0f} | "
              f"{f(lat.get('p50'))} | {f(lat.get('p99'))} | {p['valid']} {p.get('invalid_reason', '')} | "
              f"{rps * per / c['items_per_s']:.0%} |")
print(f"| forward-only ceiling (1 device, in-process, graphs {graphs[0]}) | | {c['items_per_s']:,.0f} (n={c['n']}, {c['min']:,.0f}-{c['max']:,.0f}) | | | | 100% |")
EOF
