#!/usr/bin/env bash
# The acceptance run of `infertune validate`: the tuned MiniLM served by `infertune serve`, peak found by
# bench's SLO search, a 10-minute soak at 80% of it, the long-tail drill and every fault drill.
#   scripts/validate_minilm_soak.sh [ARTIFACT] [OUT]      (ARTIFACT default runs/quick/artifact, tuned if missing)
# Prints the load average before and after: on a shared box the figures move with it.
set -euo pipefail
ART=${1:-runs/quick/artifact}
OUT=${2:-runs/validate-minilm}
PY=${PY:-python}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ ! -f "$ART/manifest.json" ]; then
  $PY -m infertune.cli.main tune --quick --out "$(dirname "$ART")"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
set +e
$PY -m infertune.cli.main validate "$ART" --soak 10m --slo 'p99_e2e_ms<=200' --out "$OUT" "${@:3}"
rc=$?
set -e
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); exit code $rc; report $OUT/validate.html" >&2
exit $rc
