#!/usr/bin/env bash
# A short check on the lent GPU that CUDA graphs capture and match eager: the GPU test (MiniLM, encoder, 4D mask)
# and the forward-only ceiling of a 2-layer random-weight Qwen3-Embedding shape (decoder, no mask) with
# --cuda-graphs on, on 64 texts. Carry [".whl", ".gpu"].
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 scripts/gpu/restore_minilm.py /tmp/minilm > /dev/null
INFERTUNE_TEST_MINILM=/tmp/minilm python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_graphs.py -s 2>&1 | grep -E "^E |MiniLM|passed|failed" | head -12
python3 -c "
from infertune.workloads.texts import load_workload; import json
open('/tmp/t64.jsonl','w').write(''.join(json.dumps({'input': t})+'\n' for t in load_workload(None).items[:64]))"
rm -rf /tmp/tinyq && cp -r .gpu/qwen3-embedding /tmp/tinyq && python3 - <<'PY'
import json
p = "/tmp/tinyq/config.json"; c = json.load(open(p))  # a 2-layer Qwen3 shape: the decoder path, in seconds
c.update(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
         intermediate_size=128)
c["layer_types"] = c.get("layer_types", ["full_attention"] * 2)[:2]
json.dump(c, open(p, "w"))
PY
for G in ${GRAPHS:-on off}; do
  python3 -m infertune.cli.main serve /tmp/tinyq --task embed --device cuda --ceiling --cuda-graphs $G \
    --workload /tmp/t64.jsonl --json 2> "$OUT/ceiling_$G.err" > "$OUT/ceiling_$G.json"
  grep -i "warn\|error\|turned off" "$OUT/ceiling_$G.err" | head -3
done
python3 - "$OUT" <<'PY'
import json, sys
print("| CUDA graphs | ceiling items/s (n, range) | graph stats |\n|---|---|---|")
for g in ("on", "off"):
    try:
        c = json.load(open(f"{sys.argv[1]}/ceiling_{g}.json"))
        print(f"| {g} | {c['items_per_s']:,.0f} (n={c['n']}, {c['min']:,.0f}-{c['max']:,.0f}) | {c.get('cuda_graphs')} |")
    except Exception as e:
        print(f"| {g} | failed: {e} | |")
PY
