#!/usr/bin/env bash
# On the lent H200: infertune tune --device cuda on MiniLM. Usage: tune_h200.sh real|random [--quick]
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,driver_version,memory.total,ecc.mode.current,clocks.sm --format=csv
if [ "$1" = real ]; then python3 scripts/gpu/minilm_parts.py join /tmp/minilm || exit 1
else python3 scripts/gpu/minilm_parts.py random /tmp/minilm || exit 1; fi
shift
python3 -m infertune.cli.main tune /tmp/minilm --device cuda --out /tmp/tunerun --json "$@" > $OUT/tune_result.json
echo "tune exit $?"
cp /tmp/tunerun/report.html $OUT/tune_report.html 2>/dev/null
cat /tmp/tunerun/artifact/manifest.json 2>/dev/null | head -30
