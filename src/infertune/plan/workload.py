"""Request lengths for planning: JSONL with token counts ({"prompt_tokens": n, "output_tokens": m}, also
input_tokens / max_tokens), or text requests ({"prompt": ...}, {"input": ...}, plain lines) whose length
is estimated at 4 characters per token."""

from __future__ import annotations

import json
from pathlib import Path

from infertune.errors import InfertuneError

CHARS_PER_TOKEN = 4.0


def request_lengths(path: str | Path) -> tuple[list[int], list[int], str]:
    """(prompt token counts, output token counts, how they were obtained)."""
    p = Path(path)
    if not p.is_file():
        raise InfertuneError(f"workload file {p} does not exist")
    prompts: list[int] = []
    outputs: list[int] = []
    estimated = False
    for no, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        obj = None
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise InfertuneError(f"{p}:{no}: not valid JSON ({e.msg})") from e
        if isinstance(obj, dict):
            n = obj.get("prompt_tokens", obj.get("input_tokens"))
            if n is None:
                text = obj.get("prompt", obj.get("input", obj.get("text")))
                if isinstance(text, list):
                    text = " ".join(map(str, text))
                if not isinstance(text, str):
                    raise InfertuneError(f"{p}:{no}: expected prompt_tokens/input_tokens or a prompt/input/text field")
                n, estimated = max(1, round(len(text) / CHARS_PER_TOKEN)), True
            prompts.append(int(n))
            out = obj.get("output_tokens", obj.get("max_tokens"))
            if out is not None:
                outputs.append(int(out))
        else:
            prompts.append(max(1, round(len(line) / CHARS_PER_TOKEN)))
            estimated = True
    if not prompts:
        raise InfertuneError(f"workload file {p} has no requests")
    how = "estimated at 4 characters per token" if estimated else "token counts from the file"
    return prompts, outputs, how
