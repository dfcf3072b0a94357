#!/usr/bin/env bash
# On the lent H200: the serving stack before and after a change, side by side in one run, with the product's own
# commands (scripts/gpu/serve_h200.sh: 1 input c=256, 32 inputs c=32, the forward-only ceiling). The first set tunes
# (quick) and serves; the later sets serve that same artifact. Each set runs this checkout's code ("new") or the
# src/ folder in .before ("old": `git archive COMMIT src | tar -x -C .before`, then carry .before).
# Usage: serve_before_after.sh "old new old"   (the order; alternate them so drift hits both). A tune and three
# sets take about 460 s of the 600 s a call may run: run "new old new" and "old new old" as two calls.
set -u
OUT0=$OUT; k=0
for who in ${1:-old new old}; do
  k=$((k + 1)); src=""; [ "$who" = old ] && src=$PWD/.before/src
  echo "=== set $k: $who code"
  # what could make a later set slower whatever its code (session 22 saw later sets slower by position): load
  # left on the host's cores, processes still running, the GPU's clocks, temperature and throttle reasons
  echo "host: $(cut -d' ' -f1-3 /proc/loadavg) load; busiest: $(ps -eo pcpu=,comm= --sort=-pcpu | head -3 | tr -s ' ' | paste -sd,)"
  nvidia-smi --query-gpu=temperature.gpu,clocks.sm,clocks.mem,power.draw,clocks_throttle_reasons.active \
    --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  if [ $k = 1 ]; then
    env ${src:+SRC=$src} OUT=$OUT0/$k bash scripts/gpu/serve_h200.sh 0 2>&1 | grep -E "^\||tune winner|tune wall|ready worker"
  else
    env SKIP_TUNE=1 ART=/tmp/tunerun/artifact ${src:+SRC=$src} OUT=$OUT0/$k bash scripts/gpu/serve_h200.sh 0 2>&1 \
      | grep -E "^\||ready worker"
  fi
  grep -hE "^engine: [0-9]+ batches|^stopped after" $OUT0/$k/serve_*.log
done
# what comes back is at most 8 files: the bench points of every set and the first set's tune
find $OUT0 -name "*.log" -delete; find $OUT0 -name ceiling.json -delete; find $OUT0 -mindepth 2 -name tune.json ! -path "*/1/*" -delete
