#!/usr/bin/env bash
# On the lent H200: tune's GPU pass with its tokenization on threads of the worker vs in N processes, side by side in
# one run (INFERTUNE_TUNE_TOKENIZERS, default list "1 12 6"; 1 = threads), the packed fp16 candidate only (plus the
# reference and the naive baseline tune always runs); py-spy samples every process of the second tune for 12 s.
# Carry [".whl", ".gpu"] (scripts/gpu/carry.sh). The table is printed last.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; R=/tmp/res; mkdir -p "$OUT" $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
[ -d /tmp/minilm ] || python3 scripts/gpu/restore_minilm.py /tmp/minilm > /dev/null || exit 1
i=0
for N in ${LIST:-1 12 6}; do
  i=$((i + 1))
  INFERTUNE_TUNE_TOKENIZERS=$N python3 -m infertune.cli.main tune /tmp/minilm --device cuda --quick --candidates packed \
    --time-budget ${BUDGET:-70} --out /tmp/t$N --json > $R/tune_$N.json 2> $R/tune_$N.log &
  T=$!
  if [ $i -eq ${SPY:-2} ]; then sleep 35; py-spy record --pid $T --subprocesses -d 12 -r 200 --nonblocking --format raw -o $R/spy_$N.txt > /dev/null 2>&1; fi
  wait $T; echo "tokenizers=$N exit $?"; grep -E "winner|failed|error" $R/tune_$N.log | head -3
done
if [ -n "${FULL:-}" ]; then  # then the whole quick tune, as a user runs it
  python3 -m infertune.cli.main tune /tmp/minilm --device cuda --quick --out /tmp/tfull --json > $R/full.json 2> $R/full.log
  echo "full tune exit $?"
fi
python3 - $R <<'PY'
import glob, json, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    try:
        refine = (json.load(open(path)).get("search") or {}).get("refine") or {}
    except Exception:  # noqa: BLE001
        continue
    for engine, r in refine.items():
        print(path.rsplit("/", 1)[1], engine, "budget search wait shares (tokens, device) by budget:", r.get("wait_share"))
PY
python3 - $R <<'PY'
import collections, glob, json, sys
R = sys.argv[1]
for path in glob.glob(f"{R}/spy_*.txt"):
    by_thread, total = collections.Counter(), 0
    for line in open(path):
        stack, _, n = line.rstrip().rpartition(" ")
        if not n.isdigit() or "overlapped_pass" not in stack and "collect" not in stack: continue
        frames = [f.split(" (")[0] for f in stack.split(";") if f]
        total += int(n); by_thread[frames[-1] if frames else "?"] += int(n)
    print(path, "worker main-thread samples", total, "self:", "; ".join(f"{f} {c / max(total, 1):.0%}" for f, c in by_thread.most_common(12)))
print("\n| tokenizers | candidate | status | items/s best | median | range | n |\n|---|---|---|---:|---:|---|---:|")
for path in sorted(glob.glob(f"{R}/tune_*.json")) + glob.glob(f"{R}/full.json"):
    n = "full" if path.endswith("full.json") else path.rsplit("_", 1)[1][:-5]
    try:
        t = json.load(open(path))
    except Exception as e:  # noqa: BLE001
        print(n, "no result:", e); continue
    for c in t["candidates"]:
        m = c.get("measurement") or {}
        print(f"| {n} | {c['name']} | {c.get('status')} | {c.get('items_per_s') or 0:,.0f} | {m.get('items_per_s_median') or 0:,.0f} | "
              f"{m.get('items_per_s_spread')} | {m.get('passes')} | {m.get('items_per_pass')} items/pass, {m.get('batches_per_pass')} batches, {m.get('tokens_per_s') or 0:,.0f} tok/s; waits {m.get('wait_share')}, probe {(c.get('probe') or {}).get('speed')} waits {(c.get('probe') or {}).get('wait_share')} |")
PY
tar czf $OUT/res.tgz -C $R .
