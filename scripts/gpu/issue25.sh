#!/usr/bin/env bash
# Issue 25 on the H200 through the product's own commands, in a user's environment: the image plus every package of
# [torch,serve,bench,report,gpu] it lacks, torchao included (scripts/gpu/carry.sh; carry [".whl", ".gpu"]).
#   STEP=embed (default): the imports' CUDA state; the GPU worker test; `tune minilm --device cuda --quick`;
#                         `tune <Qwen3-Embedding-0.6B shape> --device cuda --quick --workload W` (W: mixed lengths,
#                         p99 >= 700 tokens, >= 20 texts over 512)
#   STEP=lm:              `tune <Qwen3-0.6B shape> --device cuda` (full, LM_BUDGET s, default 450: a call has 600)
#   STEP=qwen+lm:         the Qwen3-Embedding tune, then the LM tune (LM_BUDGET default 330, to fit one call)
#   STEP=qwen:            the Qwen3-Embedding tune alone. SKIP_ENV=1 skips the imports check (20 s there)
#   STEP=minilm:          `tune minilm --quick`, then `tune minilm` full (MINILM_BUDGET s, default 240): the torchao
#                         int8/fp8 candidates and the per-bucket accuracy of each (issue 28)
#   STEP=torchao:         `tune minilm --candidates torchao,torch-eager/fp16` (MINILM_BUDGET s, default 360): the torchao int8/fp8
#                         candidates beside fp16, each to a verdict (a full run's budget skipped them; issue 28)
#   STEP=mixed:           issue 28's GPU precisions on MiniLM: `tune minilm --candidates
#                         torch-eager/fp16/batches=packed,torchao,mixed --drop-below 0` under a strict budget (MIN_COS,
#                         default 0.999: the mixed step needs an engine over budget to rescue). --drop-below 0 takes
#                         every quantized engine to verification, so each has its per-bucket accuracy
#   STEP=qwen-mixed:      the same on the Qwen3-Embedding shape (random weights: for speed) on the sample workload
#   STEP=qwen-eager:      the same with torchao eager (torch-eager/fp8, torch-eager/int8: named, not in the default list)
# BUDGET (default 900 s) is a cap, not a wish: these runs end when their work is done, inside the call's 600 s;
# results.json is copied to $OUT every 10 s, so a call cut short still shows how far it got.
# Models: MiniLM's real weights (fp16-rounded for the carry); the Qwen3 shapes are tests/unit/configs/qwen3-0.6b.json
# with random weights and SmolLM2's tokenizer (no Qwen3 tokenizer is reachable here). The table prints last.
# Dry run here: DEVICE=cpu STEP=embed bash scripts/gpu/issue25.sh (slow; checks the plumbing only)
set -uo pipefail
DEV=${DEVICE:-cuda}; STEP=${STEP:-embed}
if [ "$DEV" = cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH; PY=python3
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
else
  PY=${PY:-.venv/bin/python}
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/r25; mkdir -p $R
I="$PY -m infertune.cli.main"
nproc
[ -z "${SKIP_ENV:-}" ] && $PY - <<'PY' 2>&1 | tee $OUT/env.txt
import importlib.metadata as md, time
t = time.time()
import torch, sentence_transformers  # noqa: F401  (transformers' quantizer registry imports torchao)
print({p: md.version(p) for p in ("torch", "transformers", "sentence-transformers", "torchao", "tokenizers", "pydantic",
                                  "fastapi", "tokie", "typer")})
print(f"imports {time.time() - t:.1f} s; torch.cuda.is_initialized() after them: {torch.cuda.is_initialized()}")
PY
qwen_dir() {  # $1: directory; a Qwen3 config with SmolLM2's tokenizer
  mkdir -p "$1"; cp tests/unit/configs/qwen3-0.6b.json "$1/config.json"; cp .gpu/tokenizer/*.json .gpu/tokenizer/*.jinja "$1/"
  $PY -c "import lzma,sys; open(sys.argv[1]+'/tokenizer.json','wb').write(lzma.decompress(open('.gpu/tokenizer/tokenizer.json.xz','rb').read()))" "$1"
}
tune() {  # $1: label, rest: tune arguments
  local label=$1; shift
  # the log and the JSON go straight to $OUT: a call cut short by its limit still brings them back
  /usr/bin/time -f "%e" -o $R/$label.wall $I tune "$@" --device $DEV --out $R/$label --json > "$OUT/$label.json" \
    2> "$OUT/$label.log"
  echo "$label: exit $? in $(cat $R/$label.wall) s"; grep -E "^workers:|Winner|No candidate" "$OUT/$label.log" | head -3
  cp "$OUT/$label.json" $R/$label.json
}
LABELS=""
if [ "$STEP" = embed ]; then
  [ "$DEV" = cuda ] && $PY -m pytest -q -p no:cacheprovider -s tests/gpu/test_worker_cuda.py 2>&1 | grep -E "fell_back|passed|failed|^E " | head -5
  [ -d /tmp/minilm ] || $PY scripts/gpu/restore_minilm.py /tmp/minilm > /dev/null || exit 1
  tune minilm /tmp/minilm --quick
  LABELS=minilm
fi
if [ "$STEP" = minilm ]; then
  [ -d /tmp/minilm ] || $PY scripts/gpu/restore_minilm.py /tmp/minilm > /dev/null || exit 1
  tune minilm /tmp/minilm --quick
  tune minilm-full /tmp/minilm --time-budget ${MINILM_BUDGET:-240}
  LABELS="minilm minilm-full"
fi
if [ "$STEP" = torchao ]; then
  [ -d /tmp/minilm ] || $PY scripts/gpu/restore_minilm.py /tmp/minilm > /dev/null || exit 1
  tune minilm-torchao /tmp/minilm --candidates torchao,torch-eager/fp16 --time-budget ${MINILM_BUDGET:-360}
  LABELS="minilm-torchao"
fi
partial() {  # $1: label; copies the run's results.json to $OUT while it runs
  # its own output goes nowhere: a background job holding the script's stdout keeps a pipe reader waiting
  (while sleep 10; do cp $R/$1/results.json "$OUT/$1.partial.json" 2>/dev/null; done) > /dev/null 2>&1 &
  PARTIAL=$!
}
STRICT="--drop-below 0 --min-cosine ${MIN_COS:-0.999} --min-cosine-min ${MIN_COS_MIN:-0.99} --time-budget ${BUDGET:-900}"
if [ "$STEP" = mixed ]; then
  [ -d /tmp/minilm ] || $PY scripts/gpu/restore_minilm.py /tmp/minilm > /dev/null || exit 1
  partial minilm-mixed
  tune minilm-mixed /tmp/minilm --candidates torch-eager/fp16/batches=packed,torchao,mixed $STRICT
  kill $PARTIAL
  LABELS="minilm-mixed"
fi
if [ "$STEP" = qwen-mixed ] || [ "$STEP" = qwen-eager ]; then
  Q=/tmp/hub/Qwen3-Embedding-0.6B; rm -rf $Q; qwen_dir $Q
  L=qwen3emb-mixed; F=torch-eager/bf16,torchao,mixed
  # eager torchao: the compiled fp8 probe of this shape timed out after 204 s (session 19)
  [ "$STEP" = qwen-eager ] && L=qwen3emb-eager && F=torch-eager/bf16,torch-eager/fp8,torch-eager/int8,mixed
  L=${LABEL:-$L}; F=${CANDS:-$F}  # one call per question: e.g. LABEL=qwen3emb-loose CANDS=... MIN_COS=0.98
  partial $L
  tune $L $Q --candidates $F $STRICT
  kill $PARTIAL
  LABELS="$L"
fi
if [ "$STEP" = embed ] || [ "$STEP" = qwen+lm ] || [ "$STEP" = qwen ]; then
  Q=/tmp/hub/Qwen3-Embedding-0.6B; rm -rf $Q; qwen_dir $Q
  $PY - "$Q" <<'PY'
import json, random, sys
import numpy as np
from transformers import AutoTokenizer
from infertune.workloads.texts import load_workload
tok = AutoTokenizer.from_pretrained(sys.argv[1]); items = load_workload(None).items
rng = random.Random(25)
longs = []  # documents of 560-1000 tokens made of consecutive sample texts: the long tail of a mixed workload
while len(longs) < 40:
    want, parts, n = rng.randint(560, 1000), [], 0
    for t in items[rng.randrange(len(items)):]:
        parts.append(t); n += len(tok(t)["input_ids"])
        if n >= want: break
    if n >= want: longs.append(" ".join(parts))
texts = items + longs; rng.shuffle(texts)
open("/tmp/w25.jsonl", "w").write("".join(json.dumps({"input": t}) + "\n" for t in texts))
n = np.array([len(tok(t)["input_ids"]) for t in texts])
print(f"W: {len(texts)} texts, tokens p50 {np.percentile(n, 50):.0f} p99 {np.percentile(n, 99):.0f} max {n.max()}, "
      f"{(n > 512).sum()} over 512")
PY
  tune qwen3emb $Q --quick --workload /tmp/w25.jsonl
  LABELS="$LABELS qwen3emb"
fi
if [ "$STEP" = lm ] || [ "$STEP" = qwen+lm ]; then
  L=/tmp/hub/Qwen3-0.6B; rm -rf $L; qwen_dir $L
  [ "$STEP" = lm ] && B=${LM_BUDGET:-450} || B=${LM_BUDGET:-330}
  tune qwen3lm $L --time-budget $B
  LABELS="$LABELS qwen3lm"
fi
$PY - $R $LABELS <<'PY'
import json, sys
root = sys.argv[1]
for label in sys.argv[2:]:
    try:
        r = json.load(open(f"{root}/{label}.json"))
    except Exception as e:  # noqa: BLE001
        print(label, "no results:", e); continue
    s, w, b = r.get("search", {}), r.get("winner") or {}, r.get("baseline") or {}
    unit = "tokens/s" if r.get("kind") == "causal-lm" else "items/s"
    speed = lambda c: c.get("items_per_s") or c.get("tokens_per_s") or 0  # noqa: E731
    print(f"\n== {label}: wall {r.get('wall_s')} s of {s.get('time_budget_s')} s; workers {s.get('worker_start')}")
    print(f"   stages: {[(x['stage'], round(x['ended_s'] - x['started_s'])) for x in s.get('stages', [])]}")
    print(f"   worker time by stage: {s.get('cost_s')}")
    if w:
        print(f"   winner {w['name']} {speed(w):.1f} {unit}; baseline {b.get('name')} {speed(b) or 0:.1f}; "
              f"x{(speed(w) / speed(b)) if speed(b) else float('nan'):.2f}")
    mp = r.get("mixed_precision") or {}
    if mp:
        print(f"   mixed: {({k: v for k, v in mp.items() if k not in ('steps', 'keep_high')})}")
        print(f"   mixed steps: {[(x['kept_high'], round(x['cosine_mean'], 5), x['meets_budget']) for x in mp.get('steps', [])]}")
        print(f"   most sensitive: {[(x['layer'], round(x['drop'], 5)) for x in (r.get('sensitivity') or [])[:6]]}")
    for n in s.get("not_tried", []):
        print(f"   not tried {n['candidate']}: {n['why'][:150]}")
    for c in r.get("candidates", []):
        cost = (s.get("candidates", {}).get(c["name"]) or {}).get("cost_s")
        pr = (c.get("probe") or {}).get("speed") or 0
        print(f"   {c['name'][:52]:52} {c['status']:8} {c.get('stage') or '-':8} {speed(c) or 0:10.1f} probe {pr:9.1f} "
              f"t={c.get('time_s')} {cost} {(c.get('reason') or '')[:110]}")
        for bk in (c.get("accuracy") or {}).get("by_bucket", []):
            print(f"      bucket {bk['bucket']:>8} n={bk['n']:3} cos mean {bk.get('cosine_mean') or 0:.6f} "
                  f"min {bk.get('cosine_min') or 0:.6f} top10 {bk.get('topk_overlap') or 0:.3f}")
PY
