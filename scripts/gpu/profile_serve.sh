#!/usr/bin/env bash
# On the lent H200: where does `infertune serve` spend its time under load? GPU tests -> tune (quick) -> for each
# serve variant in VARIANTS (FRONTENDS/MODE[/TOKENIZER], default "8/default 12/default"; MODE is a --cuda-graphs mode,
# default = the artifact's own; FRONTENDS "d" = serve's default; TOKENIZER sets INFERTUNE_TOKENIZER for that serve:
# tokenizers = the Rust tokenizer instead of tokie; or NAME=VALUE, an environment variable for that serve): serve on one GPU, and for each bench
# point (1 input/request c=256; 32 inputs/request c=32) py-spy samples the engine and one frontend for 8 s while
# the bench runs, nvidia-smi samples GPU utilisation and top every process's CPU share -> the forward-only ceiling
# of each mode. Everything lands in $OUT/res.tgz; the summary table is printed last. Carry [".whl", ".gpu"] (scripts/gpu/carry.sh makes them).
#
# Env: SKIP_TUNE=1 (serve the untuned fp32 model), SKIP_TESTS=1, EXTRA_SERVE (more serve flags), VARIANTS.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; R=/tmp/res; mkdir -p "$OUT" $R
I="python3 -m infertune.cli.main"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; nproc
[ -d /tmp/minilm ] || python3 scripts/gpu/restore_minilm.py /tmp/minilm > /dev/null || exit 1
[ -z "${SKIP_TESTS:-}" ] && INFERTUNE_TEST_MINILM=/tmp/minilm python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_cuda_graphs.py -s 2>&1 | grep -E "^E |MiniLM|packed|passed|failed|Error" | head -20
ART=/tmp/minilm
if [ -z "${SKIP_TUNE:-}" ]; then
  /usr/bin/time -f "tune wall %e s" $I tune /tmp/minilm --device cuda --quick --out /tmp/tunerun --json > $R/tune.json 2> $R/tune.log
  rc=$?; echo "tune exit $rc"; tail -4 $R/tune.log; ART=/tmp/tunerun/artifact; tar czf $OUT/res.tgz -C $R .
  [ $rc -eq 0 ] || { tail -30 $R/tune.log; exit 1; }
  python3 -c "import json,sys; w=json.load(open(sys.argv[1])).get('winner') or {}; print('tune winner:', w.get('name'), w.get('items_per_s'))" $R/tune.json
fi
summary() {  # $1: py-spy raw file, $2: label
python3 - "$1" "$2" <<'PY'
import collections, sys
path, label = sys.argv[1], sys.argv[2]
self_c, incl, total = collections.Counter(), collections.Counter(), 0
try:
    lines = open(path).readlines()
except OSError as e:
    print(label, "no profile:", e); sys.exit()
for line in lines:
    stack, _, n = line.rstrip().rpartition(" ")
    if not n.isdigit(): continue
    n = int(n); total += n
    frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")" for f in stack.split(";") if f]
    if frames: self_c[frames[-1]] += n
    for f in set(frames): incl[f] += n
total = max(total, 1)
print(f"\n{label}: {total} non-idle samples in 8 s at 250/s = {total / 2000:.0%} of one core busy")
print("  self:", "; ".join(f"{f} {c / total:.0%}" for f, c in self_c.most_common(14)))
print("  incl:", "; ".join(f"{f} {c / total:.0%}" for f, c in incl.most_common(30)))
PY
}
VARIANTS=${VARIANTS:-8/default 12/default}
for V in $VARIANTS; do
  IFS=/ read -r F M TOK <<< "$V"; G=${F}fe_$M${TOK:+_${TOK//=/-}}
  EXTRA_ENV="INFERTUNE_TOKENIZER=${TOK:-}"; case "$TOK" in *=*) EXTRA_ENV=$TOK ;; esac
  FLAGS=""; [ "$F" != d ] && FLAGS="--frontends $F"; [ "$M" != default ] && FLAGS="$FLAGS --cuda-graphs $M"
  env "$EXTRA_ENV" $I serve $ART --device cuda --devices 0 --truncate --port 8000 --max-queue 4096 $FLAGS ${EXTRA_SERVE:-} 2> $R/serve_$G.log &
  SRV=$!
  for _ in $(seq 1 240); do curl -sf localhost:8000/ready > /dev/null && break; kill -0 $SRV 2> /dev/null || break; sleep 1; done
  curl -s localhost:8000/ready | python3 -c "import json,sys; r=json.load(sys.stdin); print('ready:', r.get('tokenizer'), r.get('settings'))"
  ENG=""; FE=""
  for c in $(pgrep -P $SRV); do
    d=$(py-spy dump --pid $c 2>/dev/null)
    if echo "$d" | grep -q batch_core; then ENG=$c; elif echo "$d" | grep -q -i "uvicorn\|frontend\|asyncio"; then FE=${FE:-$c}; fi
  done
  echo "graphs $G: serve $SRV engine $ENG frontend $FE children $(pgrep -P $SRV | wc -l)"
  for point in "c256:--concurrency 256" "b32:--inputs-per-request 32 --concurrency 32"; do
    name=${point%%:*}_$G
    $I bench http://127.0.0.1:8000 ${point#*:} --workers 4 --duration 20 --warmup 3 --out /tmp/bench_$name > $R/bench_$name.log 2>&1 &
    B=$!
    sleep 9
    py-spy record --pid $ENG -d 8 -r 250 --nonblocking --format raw -o $R/eng_$name.txt > /dev/null 2>&1 &
    P1=$!
    py-spy record --pid $FE -d 8 -r 250 --nonblocking --format raw -o $R/fe_$name.txt > /dev/null 2>&1 &
    P2=$!
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 250 > $R/gpu_$name.txt &
    NS=$!
    sleep 3; top -b -n 1 -w 200 | head -32 > $R/top_$name.txt
    wait $P1 $P2; kill $NS
    wait $B; tail -2 $R/bench_$name.log
    cp /tmp/bench_$name/bench.json $R/bench_$name.json
    { summary $R/eng_$name.txt "$name engine"; summary $R/fe_$name.txt "$name frontend"
      python3 -c "import sys; g=[float(x) for x in open(sys.argv[1]).read().split() if x.strip().isdigit()]; print(sys.argv[2], 'GPU util %: n', len(g), 'median', sorted(g)[len(g)//2] if g else None, g)" $R/gpu_$name.txt "$name"
      grep -E "python|PID" $R/top_$name.txt | head -20; } > $R/prof_$name.txt
  done
  kill -TERM $SRV; wait $SRV; echo "serve exit $?"; grep -v "^draining" $R/serve_$G.log | tail -4
  CM=""; [ "$M" != default ] && CM="--cuda-graphs $M"
  [ -f $R/ceiling_$M.json ] || CUDA_VISIBLE_DEVICES=0 $I serve $ART --device cuda --ceiling $CM --json > $R/ceiling_$M.json 2> $R/ceiling_$M.log
  tar czf $OUT/res.tgz -C $R .  # so far, in case the call runs out of time
done
grep -h "GPU util" $R/prof_*.txt | cut -c1-60
tar czf $OUT/res.tgz -C $R .
python3 - $R "$VARIANTS" <<'PY'
import json, sys
R, variants = sys.argv[1], sys.argv[2].split()
print("\n| serve variant | point | req/s | items/s | P50 ms | P99 ms | n | valid | vs ceiling of its mode |\n|---|---|---:|---:|---:|---:|---:|---|---:|")
for v in variants:
    f, m, *tok = v.split("/")
    g = f"{f}fe_{m}" + (f"_{tok[0].replace('=', '-')}" if tok else "")
    try:
        c = json.load(open(f"{R}/ceiling_{m}.json"))
    except Exception as e:  # noqa: BLE001
        print(g, "no ceiling:", e); c = {"items_per_s": float("nan"), "n": 0, "min": 0, "max": 0}
    for name, per in (("c256", 1), ("b32", 32)):
        try:
            pts = json.load(open(f"{R}/bench_{name}_{g}.json"))["points"]
        except Exception as e:  # noqa: BLE001
            print(name, g, "no bench:", e); continue
        for p in pts:
            r, l = p["achieved_rps"], p["latency_ms"]
            print(f"| {g} | {name} c={p['offered']['concurrency']} | {r:,.0f} | {r * per:,.0f} | {l.get('p50'):.1f} | "
                  f"{l.get('p99'):.1f} | {p['n']} | {p['valid']} {p.get('invalid_reason', '')} | {r * per / c['items_per_s']:.0%} |")
    print(f"| {g} | ceiling | | {c['items_per_s']:,.0f} (n={c['n']}, {c['min']:,.0f}-{c['max']:,.0f}; packed {c.get('packed')}, "
          f"budget {c.get('budget_tokens')}, {c.get('items_per_batch_mean')} items/batch, graphs {c.get('cuda_graphs')}) | | | | | |")
try:
    t = json.load(open(f"{R}/tune.json"))
    print("\ntune winner:", (t.get("winner") or {}).get("name"), "baseline:", (t.get("baseline") or {}).get("items_per_s"))
    for c in t["candidates"]:
        m = c.get("measurement") or {}
        print(f"  {c['name']}: {c.get('status')} {c.get('items_per_s')} items/s (median {m.get('items_per_s_median')}, "
              f"n={m.get('passes')}, range {m.get('items_per_s_spread')}) cos {(c.get('accuracy') or {}).get('cosine_min')} "
              f"probe {(c.get('probe') or {}).get('speed')} {(c.get('error') or c.get('reason') or '')[:150]}")
except Exception as e:  # noqa: BLE001
    print("no tune:", e)
PY
