#!/usr/bin/env bash
# `tune --lm-engine torch --device cuda` of a Qwen3-0.6B-shaped causal LM (random weights, SmolLM2's tokenizer)
# while another process holds all but $KEEP_GIB of the GPU: the fit check skips what cannot fit, the 16-bit
# reference runs on the CPU, and the run still ends with a winner and its reference named. Prints a table last;
# results under $OUT (or /tmp/lm-capped).
# Run on a GPU host after scripts/gpu/carry.sh: bash benchmarks/gpu/lm_capped_memory.sh
set -uo pipefail
KEEP_GIB=${KEEP_GIB:-1.55}; OUT=${OUT:-/tmp/lm-capped}; M=/tmp/qwen3-0.6b-lm
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1
rm -rf "$M"; mkdir -p "$M" "$OUT"; cp tests/unit/configs/qwen3-0.6b.json "$M/config.json"
cp .gpu/tokenizer/tokenizer_config.json .gpu/tokenizer/chat_template.jinja "$M/"
xz -dc .gpu/tokenizer/tokenizer.json.xz > "$M/tokenizer.json"
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv | tee "$OUT/gpu.csv"
# the other process: holds all but KEEP_GIB of what is free, until killed
python3 - "$KEEP_GIB" > "$OUT/hog.log" 2>&1 <<'PY' &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = float(sys.argv[1]) * 2**30
x = torch.empty(int(free - keep), dtype=torch.uint8, device="cuda")
print(f"holding {x.numel() / 2**30:.2f} GiB of {total / 2**30:.1f}", flush=True)
time.sleep(3600)
PY
HOG=$!
for _ in $(seq 60); do grep -q holding "$OUT/hog.log" && break; sleep 1; done
cat "$OUT/hog.log"
nvidia-smi --query-gpu=memory.free --format=csv,noheader | sed 's/^/free for the tune: /'
# what each process holds while the tune runs (the tune's own process should hold nothing)
(while sleep 2; do nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader; done) \
  > "$OUT/gpu_procs.log" 2>&1 &
MON=$!
python3 -m infertune.cli.main tune "$M" --lm-engine torch --device cuda --quick --lm-time-budget "${BUDGET:-240}" \
  --out "$OUT/run" --json > "$OUT/result.json" 2> "$OUT/tune.log"
echo "tune exit $?"
kill $HOG $MON; wait $HOG 2>/dev/null
echo "tune pid's children and itself, max MiB held on the GPU per pid:"
awk -F', ' '{gsub(/ MiB/,"",$3); if ($3+0 > m[$1" "$2]) m[$1" "$2]=$3+0} END {for (k in m) print "  " k, m[k]}' \
  "$OUT/gpu_procs.log" | sort -k3 -n | tail -8
tail -25 "$OUT/tune.log"
python3 - "$OUT/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
lm = r.get("lm", {})
print("reference:", r.get("reference"), "|", json.dumps(lm.get("accuracy_reference")))
print(f"{'candidate':40} {'fits':5} {'need GiB':>8} {'free GiB':>8}")
for f in lm.get("fit", []):
    print(f"{f['candidate']:40} {str(f['fits']):5} {f['need_gib']:8.2f} {f['free_gib']:8.2f}")
print(f"{'candidate':40} {'status':9} {'tok/s':>8}  executed / reason")
for c in r["candidates"]:
    ex = c.get("executed") or {}
    print(f"{c['name']:40} {c['status']:9} {c.get('tokens_per_s') or 0:8.1f}  "
          f"{ex.get('device', '')} {ex.get('loaded', '')} peak_gpu_mb={ex.get('peak_gpu_mb')} {c['reason'][:150]}")
w = r.get("winner") or {}
print("winner:", w.get("name"), w.get("tokens_per_s"), "wall", r.get("wall_s"), "artifact", r.get("artifact"))
PY
