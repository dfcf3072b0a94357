"""Token ids without transformers' per-call overhead, from the fastest tokenizer that gives transformers' ids.

Why: tokenization is what a GPU server's frontends spend their CPU on: most of their samples, with the host busy and
the GPU not (docs/measurements/2026-12-01-h200-tokie). Three ways to get the ids, fastest first:

- **tokie** (`pip install tokie`, in the `[torch]` extra): a reimplementation of Hugging Face's tokenizers (WordPiece,
  BPE, Unigram) read from the same tokenizer.json, about ten times faster per text than `encode_batch_fast` below
  (MiniLM on a 2-core AMD EPYC, docs/architecture.md, token ids). It
  holds the GIL while it works (two threads take three times as long as one), so callers that use threads for
  parallelism ask `holds_gil`.
- **the Rust tokenizer under transformers**, set up once (truncation to the model's limit, no padding) and called
  with `encode_batch_fast` (no offsets): it releases the GIL, and skips the transformers call's
  per-call overhead (docs/architecture.md, tokenizers).
- **transformers' call** itself (the definition: `reference_ids`), for a slow (Python) tokenizer or when neither of
  the above gives the same ids.

Safety: a faster path is used only after it gave exactly transformers' ids on PROBES (short, empty, unicode,
accents, CJK, control characters, special tokens written as text, over the limit). A reimplementation may still
differ on text no probe covers, so tokie's ids are also **checked while serving**: about one text in CHECK_EVERY is
tokenized again by the Rust tokenizer (which equals transformers on the probes), costing ~10% of tokie's own time.
On the first difference the encoder logs the text's length and falls back to the Rust tokenizer for good
(`describe()["fallback"]` says why); the answer for that call already uses the Rust tokenizer's ids.
INFERTUNE_TOKENIZER=tokenizers|transformers caps the choice (for a side-by-side check, or to rule tokie out).
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("infertune")
PROBES = ("Hello, world!", "", "  two  spaces  ", "Ünïcödé façade — naïve café 東京 😀",
          "token " * 600, "The quick brown fox jumps over the lazy dog. " * 40,
          "Tabs\tand\nnew\r\nlines\u00a0nbsp\u200bzero-width\u3000ideographic space",
          "Ctrl\x00\x07\x1f chars \ufeff BOM and \ufffd replacement",
          "ÀÉÎÕÜ àéîõü ß ﬁ ligature ｆｕｌｌｗｉｄｔｈ Ⅻ ² ½ e\u0301 combining",
          "中文字符测试，日本語のテキスト、한국어 텍스트 ไทย العربية עברית русский ελληνικά",
          "[CLS] [SEP] [MASK] [PAD] [UNK] <s> </s> <|endoftext|> <|im_start|>user<|im_end|> <pad>",
          "supercalifragilisticexpialidocious" * 4 + " " + "x" * 150,
          "https://example.com/a/b?c=d&e=f#g user@example.org 192.168.0.1 $1,234.56 3.14159 -42 1e-9",
          "don't can't it's I'm you're O'Neil's \"quoted\" 'single' (paren) [bracket] {brace} <angle>",
          "emoji 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 ❤️ flags 🇫🇷🇯🇵 math ∑∫√∞≠≤ arrows →⇒ box ┌─┐",
          "MiXeD CaSe WORDS and snake_case camelCase kebab-case dotted.name.here ... !!! ???",
          "a", " ", "\n", "0123456789" * 30)
CHECK_EVERY = 100  # tokie: about one text in this many is tokenized again by the Rust tokenizer and compared


def reference_ids(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """What transformers gives (the definition every faster path must match)."""
    return tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]


def _rust_for(tokenizer: Any, max_length: int, direction: str) -> Any:
    """A copy of transformers' Rust tokenizer set up once: truncation to the limit, no padding (never reconfigured,
    so threads can share it; transformers' own call mutates the shared one)."""
    rust = copy.deepcopy(tokenizer.backend_tokenizer)
    rust.no_padding()
    rust.enable_truncation(max_length, strategy="longest_first", direction=direction)
    return rust


def rust_encoder(rust: Any) -> Callable[[Sequence[str]], list[list[int]]]:
    """texts -> ids from a Rust tokenizer already set up (truncation, no padding), without offsets."""
    encode = getattr(rust, "encode_batch_fast", None) or rust.encode_batch

    def ids(texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in encode(list(texts))]

    return ids


def _tokie_for(rust_json: str, max_length: int, direction: str) -> Any:
    """tokie's tokenizer for the same tokenizer.json (the Rust tokenizer's own JSON), truncating the same way."""
    import tokie

    with tempfile.TemporaryDirectory(prefix="infertune-tokie-") as d:
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(rust_json)
        tk = tokie.Tokenizer.from_json(path)
    tk.no_padding()
    tk.enable_truncation(max_length, strategy="longest_first", direction=direction)
    return tk


class TokenIds:
    """texts -> token ids (truncated to the model's limit, special tokens included), equal to `reference_ids`.

    `name`: which tokenizer answers ("tokie" or "tokenizers"); `holds_gil`: threads do not tokenize in parallel;
    `recipe`: what another process needs to build the same encoder (`from_recipe`), a tuple of plain data."""

    def __init__(self, rust: Any, max_length: int, direction: str, tk: Any = None, check_every: int = CHECK_EVERY):
        self.rust = rust
        self._rust_ids = rust_encoder(rust)
        self.max_length = max_length
        self.direction = direction
        self._encode = tk.encode if tk is not None else None  # tokie's; None: the Rust tokenizer answers
        self.check_every = max(1, check_every)
        self._lock = threading.Lock()
        self._count = 0  # texts tokenized by tokie
        self.checked = 0  # texts compared with the Rust tokenizer while running
        self.fallback: str | None = None  # why tokie was switched off, once it was

    @property
    def name(self) -> str:
        return "tokie" if self._encode is not None else "tokenizers"

    @property
    def holds_gil(self) -> bool:
        return self._encode is not None

    @property
    def recipe(self) -> tuple[str, str, int, str]:
        return (self.name, self.rust.to_str(), self.max_length, self.direction)

    def describe(self) -> dict[str, Any]:
        return {"tokenizer": self.name, "checked_texts": self.checked, "fallback": self.fallback}

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        encode = self._encode
        if encode is None:
            return self._rust_ids(texts)
        out = [encode(t).ids for t in texts]
        if not out:
            return out
        with self._lock:  # which texts to check: one in check_every, spread over calls of any size
            start, self._count = self._count, self._count + len(out)
        first = -start % self.check_every
        picks = list(range(first, len(out), self.check_every))
        if picks:
            want = self._rust_ids([texts[i] for i in picks])
            self.checked += len(picks)
            bad = next((i for i, w in zip(picks, want, strict=True) if out[i] != w), None)
            if bad is not None:
                self._switch_off(f"tokie's ids differed from the Rust tokenizer's on a {len(texts[bad])}-character "
                                 "text; using the Rust tokenizer from now on")
                return self._rust_ids(texts)
        return out

    def _switch_off(self, why: str) -> None:
        self._encode = None
        self.fallback = why
        log.warning("tokenizer fast path: %s", why)


def from_recipe(recipe: tuple[str, str, int, str]) -> TokenIds:
    """The encoder a `TokenIds.recipe` describes, built in this process (a tokenizer process of tune's pool)."""
    from tokenizers import Tokenizer

    name, rust_json, max_length, direction = recipe
    rust = Tokenizer.from_str(rust_json)
    tk = _tokie_for(rust_json, max_length, direction) if name == "tokie" else None
    return TokenIds(rust, max_length, direction, tk)


def fast_encoder(tokenizer: Any, max_length: int) -> TokenIds | None:
    """An encoder equal to `reference_ids` on the probes but cheaper (tokie where it is installed and agrees, else the
    Rust tokenizer), or None: no Rust tokenizer, or it does not give the same ids (then transformers' call stays)."""
    cap = os.environ.get("INFERTUNE_TOKENIZER", "").strip().lower()
    if cap == "transformers" or getattr(tokenizer, "backend_tokenizer", None) is None:
        return None
    try:
        direction = getattr(tokenizer, "truncation_side", "right") or "right"
        rust = _rust_for(tokenizer, max_length, direction)
        want = reference_ids(tokenizer, PROBES, max_length)
        if rust_encoder(rust)(PROBES) != want:
            log.info("tokenizer fast path off: the Rust tokenizer's ids differ from transformers' on the probes")
            return None
    except Exception as e:  # noqa: BLE001 - any surprise: keep the transformers call
        log.info("tokenizer fast path off: %s: %s", type(e).__name__, e)
        return None
    tk = None if cap == "tokenizers" else _checked_tokie(rust, max_length, direction, want)
    return TokenIds(rust, max_length, direction, tk)


def _checked_tokie(rust: Any, max_length: int, direction: str, want: list[list[int]]) -> Any:
    try:
        tk = _tokie_for(rust.to_str(), max_length, direction)
    except ImportError:
        return None
    except Exception as e:  # noqa: BLE001 - tokie cannot read this tokenizer: the Rust one answers
        log.info("tokie off: it could not load this tokenizer (%s: %s)", type(e).__name__, e)
        return None
    try:
        got = [tk.encode(t).ids for t in PROBES]
    except Exception as e:  # noqa: BLE001
        log.info("tokie off: %s: %s on the probes", type(e).__name__, e)
        return None
    if got != want:
        log.info("tokie off: its ids differ from transformers' on the probes")
        return None
    return tk
