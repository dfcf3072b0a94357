"""Chat/completions workloads: JSONL lines in OpenAI's shapes, or plain text (one prompt a line).

  {"messages": [{"role": "user", "content": "..."}], "max_tokens": 128}     (chat)
  {"prompt": "...", "max_tokens": 64}                                       (completions)

`max_tokens` is optional (default 128). Chat requests are rendered with the model's chat template, so
prompt lengths are counted exactly as the server will see them. The built-in sample is
data/sample_chat.jsonl (240 requests of real English from CPython's pydoc topics; prompt tokens p50 ~100,
p90 ~320, p99 ~1000 under SmolLM2's template).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from infertune.errors import InfertuneError
from infertune.workloads.source import at, is_json_lines, json_line, not_an_object, nothing_read, read_text

SAMPLE = "sample_chat.jsonl"
DEFAULT_MAX_TOKENS = 128


@dataclass(frozen=True)
class Request:
    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) pairs
    max_tokens: int = DEFAULT_MAX_TOKENS

    def render(self, tokenizer) -> str:
        """The text the model sees: the chat template applied for chat requests."""
        if self.messages is None:
            return self.prompt or ""
        msgs = [{"role": r, "content": c} for r, c in self.messages]
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return "\n".join(f"{r}: {c}" for r, c in self.messages) + "\nassistant:"

    def to_openai(self) -> dict:
        if self.messages is None:
            return {"prompt": self.prompt, "max_tokens": self.max_tokens}
        return {"messages": [{"role": r, "content": c} for r, c in self.messages], "max_tokens": self.max_tokens}


def sample_chat_path() -> Path:
    return Path(str(files("infertune") / "data" / SAMPLE))


EXAMPLE = '{"messages": [{"role": "user", "content": "..."}], "max_tokens": 128} or {"prompt": "..."}'


def _request(obj: object, where: str) -> Request:
    if not isinstance(obj, dict):
        raise not_an_object(obj, where, EXAMPLE)
    mt = obj.get("max_tokens", obj.get("max_completion_tokens", DEFAULT_MAX_TOKENS))
    if not isinstance(mt, int) or mt < 1:
        raise InfertuneError(f"{where}: max_tokens must be a positive integer, got {mt!r}")
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise InfertuneError(f"{where}: \"messages\" must be a non-empty list of {{role, content}} objects")
        pairs = []
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m:
                raise InfertuneError(f"{where}: each message needs a \"role\" and a string \"content\", got {m!r:.80}")
            pairs.append((str(m["role"]), m["content"]))
        return Request(messages=tuple(pairs), max_tokens=mt)
    for key in ("prompt", "input", "text"):
        if key in obj:
            val = obj[key]
            if isinstance(val, list) and len(val) == 1:
                val = val[0]
            if not isinstance(val, str) or not val.strip():
                raise InfertuneError(f"{where}: \"{key}\" must be a non-empty string, got {val!r:.60}")
            return Request(prompt=val, max_tokens=mt)
    raise InfertuneError(f"{where}: no \"messages\" or \"prompt\" field (keys: {', '.join(map(str, obj)) or 'none'}); "
                         f"write each line like {EXAMPLE}")


def load_chat_workload(path: str | Path | None = None) -> tuple[list[Request], str]:
    """Read a chat/completions workload; `None` gives the built-in sample. Errors name file and line."""
    p = Path(path) if path is not None else sample_chat_path()
    lines = read_text(p).splitlines()
    as_json = is_json_lines(p, lines)
    out: list[Request] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not as_json:
            out.append(Request(prompt=line))
            continue
        out.append(_request(json_line(line, at(p, no), EXAMPLE), at(p, no)))
    if not out:
        raise nothing_read(p, "requests", "one JSON object (or prompt) per line")
    return out, str(p)
