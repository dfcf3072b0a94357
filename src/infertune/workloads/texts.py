"""Texts to embed: the user's real requests. JSONL ({"input": ...} as in OpenAI's embeddings API, or
{"text": ...}) or plain text, one item per line."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from infertune.errors import InfertuneError
from infertune.workloads.source import at, is_json_lines, json_line, not_an_object, nothing_read, read_text

SAMPLE = "sample_embeddings.jsonl"


@dataclass
class Workload:
    items: list[str]
    source: str
    lines: list[int] = field(default_factory=list)  # 1-based line of each item in the source


def sample_path() -> Path:
    return Path(str(files("infertune") / "data" / SAMPLE))


EXAMPLE = '{"input": "text"}'


def _texts_from_json(obj: object, where: str) -> list[str]:
    if not isinstance(obj, dict):
        raise not_an_object(obj, where, EXAMPLE)
    for key in ("input", "text", "prompt"):
        if key in obj:
            val = obj[key]
            if isinstance(val, str):
                return [val]
            if isinstance(val, list) and val and all(isinstance(v, str) for v in val):
                return list(val)
            raise InfertuneError(f"{where}: field {key!r} must be a string or a list of strings, got {val!r:.60}")
    raise InfertuneError(f"{where}: no \"input\" or \"text\" field (keys: {', '.join(map(str, obj)) or 'none'}); "
                         f"write each line like {EXAMPLE}")


def load_workload(path: str | Path | None = None) -> Workload:
    """Read a workload file; `None` gives the built-in sample. Errors name file, line and problem."""
    p = Path(path) if path is not None else sample_path()
    lines = read_text(p).splitlines()
    as_json = is_json_lines(p, lines)
    items: list[str] = []
    where: list[int] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue  # blank lines are allowed and skipped
        if "\x00" in line:
            raise InfertuneError(f"{at(p, no)}: contains a NUL byte; is it a binary file? Pass a text file")
        texts = _texts_from_json(json_line(line, at(p, no), EXAMPLE), at(p, no)) if as_json else [line]
        for t in texts:
            if not t.strip():
                raise InfertuneError(f"{at(p, no)}: empty text; remove the line or give it content")
            items.append(t)
            where.append(no)
    if not items:
        raise nothing_read(p, "items", "one text (or JSON object) per line")
    return Workload(items=items, source=str(p), lines=where)
