"""Reading a traffic file, and the one set of errors every traffic format raises: each is an InfertuneError that
names the file (and the line, as `path:line`), says what is wrong and what to do."""

from __future__ import annotations

import json
from pathlib import Path

from infertune.errors import InfertuneError

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
ONE_PER_LINE = "pass a .jsonl or .txt file, one request a line"


def check_file(path: str | Path) -> Path:
    """The path, when it is a file; a missing file or a directory is the user's mistake."""
    p = Path(path)
    if not p.exists():
        raise InfertuneError(f"workload file {p} does not exist; {ONE_PER_LINE}")
    if p.is_dir():
        raise InfertuneError(f"workload {p} is a directory; {ONE_PER_LINE}")
    return p


def read_text(path: str | Path, errors: str = "strict") -> str:
    """The file's text, decoded as UTF-8 (`errors="replace"` for readers that only estimate from it)."""
    p = check_file(path)
    try:
        return p.read_bytes().decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise InfertuneError(f"{p}: not UTF-8 text (byte {e.start}); is it a binary file? Save it as UTF-8") from e


def at(path: str | Path, line: int) -> str:
    """Where a problem is, as every traffic error names it."""
    return f"{path}:{line}"


def is_json_lines(path: Path, lines: list[str]) -> bool:
    """JSON lines by the file's suffix, or when its first non-blank line opens an object; else one text a line."""
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    return path.suffix in JSON_SUFFIXES or first.startswith("{")


def json_line(line: str, where: str, example: str) -> object:
    """One JSON value from a line; invalid JSON says where, why and what a line should look like."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise InfertuneError(f"{where}: invalid JSON ({e.msg} at column {e.colno}); each line must be one object "
                             f"like {example}") from e


def not_an_object(obj: object, where: str, example: str) -> InfertuneError:
    return InfertuneError(f"{where}: expected a JSON object like {example}, got {type(obj).__name__}")


def nothing_read(path: str | Path, what: str, expected: str) -> InfertuneError:
    return InfertuneError(f"{path}: no {what} found; expected {expected}")
