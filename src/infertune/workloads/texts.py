"""Texts to embed: the user's real requests. JSONL ({"input": ...} as in OpenAI's embeddings API, or
{"text": ...}) or plain text, one item per line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from infertune.errors import InfertuneError

SAMPLE = "sample_embeddings.jsonl"


@dataclass
class Workload:
    items: list[str]
    source: str
    lines: list[int] = field(default_factory=list)  # 1-based line of each item in the source


def sample_path() -> Path:
    return Path(str(files("infertune") / "data" / SAMPLE))


def _texts_from_json(obj: object, where: str) -> list[str]:
    if not isinstance(obj, dict):
        raise InfertuneError(f"{where}: expected a JSON object like {{\"input\": \"...\"}}, got {type(obj).__name__}")
    for key in ("input", "text", "prompt"):
        if key in obj:
            val = obj[key]
            if isinstance(val, str):
                return [val]
            if isinstance(val, list) and val and all(isinstance(v, str) for v in val):
                return list(val)
            raise InfertuneError(f"{where}: field {key!r} must be a string or a list of strings, got {val!r:.60}")
    raise InfertuneError(f"{where}: no \"input\" or \"text\" field (keys: {', '.join(map(str, obj)) or 'none'})")


def load_workload(path: str | Path | None = None) -> Workload:
    """Read a workload file; `None` gives the built-in sample. Errors name file, line and problem."""
    p = Path(path) if path is not None else sample_path()
    if not p.exists():
        raise InfertuneError(f"workload file {p} does not exist")
    if p.is_dir():
        raise InfertuneError(f"workload {p} is a directory; pass a .jsonl or .txt file")
    try:
        raw = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InfertuneError(f"{p}: not UTF-8 text (byte {e.start}); is it a binary file?") from e
    lines = raw.splitlines()
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    as_json = p.suffix in (".jsonl", ".json", ".ndjson") or first.startswith("{")
    items: list[str] = []
    where: list[int] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue  # blank lines are allowed and skipped
        if "\x00" in line:
            raise InfertuneError(f"{p}:{no}: contains a NUL byte; is it a binary file?")
        if as_json:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InfertuneError(f"{p}:{no}: invalid JSON ({e.msg} at column {e.colno}); "
                                     "each line must be one object like {\"input\": \"text\"}") from e
            texts = _texts_from_json(obj, f"{p}:{no}")
        else:
            texts = [line]
        for t in texts:
            if not t.strip():
                raise InfertuneError(f"{p}:{no}: empty text; remove the line or give it content")
            items.append(t)
            where.append(no)
    if not items:
        raise InfertuneError(f"{p}: no items found; expected one text (or JSON object) per line")
    return Workload(items=items, source=str(p), lines=where)
