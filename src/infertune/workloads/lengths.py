"""Request lengths for planning: JSONL with token counts ({"prompt_tokens": n, "output_tokens": m}, also
input_tokens / max_tokens), or text requests ({"prompt": ...}, {"input": ...}, plain lines), counted with the
model's own tokenizer (its tokenizer.json, read by the Rust `tokenizers` library: no torch) where there is one,
else estimated at 4 characters per token, which under-counts CJK text about 3x (one token per character)."""

from __future__ import annotations

from pathlib import Path

from infertune.errors import InfertuneError
from infertune.workloads.source import at, json_line, nothing_read, read_text

CHARS_PER_TOKEN = 4.0
EXAMPLE = '{"prompt_tokens": 200, "output_tokens": 128} or {"prompt": "...", "max_tokens": 128}'


def _counter(tokenizer_dir: str | Path | None):
    """texts -> token counts (special tokens included, as the model sees them), or None with no tokenizer here."""
    f = Path(tokenizer_dir) / "tokenizer.json" if tokenizer_dir else None
    if f is None or not f.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    tok = Tokenizer.from_file(str(f))
    tok.no_padding()  # a saved tokenizer.json may pad or truncate (MiniLM's pads to 128): count the real length
    tok.no_truncation()
    return lambda texts: [len(e.ids) for e in tok.encode_batch(list(texts))]


def request_lengths(path: str | Path, tokenizer_dir: str | Path | None = None) -> tuple[list[int], list[int], str]:
    """(prompt token counts, output token counts, how they were obtained); texts are counted with the
    tokenizer.json in `tokenizer_dir` when there is one."""
    p = Path(path)
    prompts: list[int] = []
    outputs: list[int] = []
    texts: dict[int, str] = {}  # request index -> its text, counted below
    estimated = False
    for no, line in enumerate(read_text(p, errors="replace").splitlines(), 1):  # only counted: bad bytes may stay
        if not line.strip():
            continue
        obj = None
        if line.lstrip().startswith("{"):
            obj = json_line(line, at(p, no), EXAMPLE)
        if isinstance(obj, dict):
            n = obj.get("prompt_tokens", obj.get("input_tokens"))
            if n is None:
                text = obj.get("prompt", obj.get("input", obj.get("text")))
                if isinstance(text, list):
                    text = " ".join(map(str, text))
                if not isinstance(text, str):
                    raise InfertuneError(f"{at(p, no)}: expected prompt_tokens/input_tokens or a prompt/input/text "
                                         f"field; write each line like {EXAMPLE}")
                n, estimated = max(1, round(len(text) / CHARS_PER_TOKEN)), True
                texts[len(prompts)] = text
            prompts.append(_whole(n, at(p, no)))
            out = obj.get("output_tokens", obj.get("max_tokens"))
            if out is not None:
                outputs.append(_whole(out, at(p, no)))
        else:
            texts[len(prompts)] = line
            prompts.append(max(1, round(len(line) / CHARS_PER_TOKEN)))
            estimated = True
    if not prompts:
        raise nothing_read(p, "requests", "one JSON object (or text) per line")
    count = _counter(tokenizer_dir) if texts else None
    if count is not None:
        for i, n in zip(texts, count(texts.values()), strict=True):
            prompts[i] = n
        how = f"token counts from the model's tokenizer ({Path(tokenizer_dir) / 'tokenizer.json'})"
        return prompts, outputs, how if len(texts) == len(prompts) else how + " and from the file"
    return prompts, outputs, _estimated(tokenizer_dir) if estimated else "token counts from the file"


def _whole(n: object, where: str) -> int:
    try:
        return int(n)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InfertuneError(f"{where}: a token count must be a whole number, got {n!r:.40}; write each line like "
                             f"{EXAMPLE}") from None


def _estimated(tokenizer_dir: str | Path | None) -> str:
    why = ("no tokenizer.json beside the model"
           if not tokenizer_dir or not (Path(tokenizer_dir) / "tokenizer.json").is_file()
           else "the tokenizers library is not installed")
    return (f"estimated at 4 characters per token ({why}; CJK text runs about 1 token per character, so it is "
            "under-counted)")


def count_tokens(texts: list[str], tokenizer_dir: str | Path | None) -> tuple[list[int], str]:
    """Token counts of `texts` with the tokenizer.json in `tokenizer_dir` (else estimated), and how they were got."""
    count = _counter(tokenizer_dir)
    if count is not None:
        return count(texts), f"token counts from the model's tokenizer ({Path(str(tokenizer_dir)) / 'tokenizer.json'})"
    return [max(1, round(len(t) / CHARS_PER_TOKEN)) for t in texts], _estimated(tokenizer_dir)
