"""Token ids straight from the Rust tokenizer under a transformers tokenizer, when it gives the same ids.

Why: tokenization is what a GPU server's frontends spend their CPU on. Session 11 on the H200, MiniLM at 32
texts per request: each frontend spent 65-68% of its samples inside the tokenizer call, and the GPU sat at 48%.
transformers' `tokenizer(texts, truncation=True, max_length=n)` re-applies its truncation and padding settings to
the shared Rust tokenizer on every call, builds offsets, attention masks and token types, and converts each
encoding to Python lists. A copy of the Rust tokenizer set up once (truncation to the model's limit, no padding)
and `encode_batch_fast` (no offsets) gives the same ids for less: measured on the 2-core build box, 32-text
batches of the sample workload: 108.7 -> 87.0 us per text; one text per call: 121.6 -> 86.4 us.

Safety: the copy is used only after it gave exactly the transformers ids on a set of probe texts (short, empty,
unicode, over the limit, a pair of spaces); otherwise, or for a slow (Python) tokenizer, the transformers call
stays. The copy is never reconfigured, so threads can share it (transformers' call mutates the shared one).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("infertune")
PROBES = ("Hello, world!", "", "  two  spaces  ", "Ünïcödé façade — naïve café 東京 😀",
          "token " * 600, "The quick brown fox jumps over the lazy dog. " * 40)


def reference_ids(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """What transformers gives (the definition the fast path must match)."""
    return tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]


def fast_encoder(tokenizer: Any, max_length: int) -> Callable[[Sequence[str]], list[list[int]]] | None:
    """A function texts -> ids equal to `reference_ids` but cheaper, or None when there is no Rust tokenizer or
    it does not give the same ids on the probes. The function's `rust` attribute is the Rust tokenizer it uses
    (set up and checked; `rust.to_str()` rebuilds it in another process: backends/tokenize_pool.py)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        rust = copy.deepcopy(backend)
        rust.no_padding()
        rust.enable_truncation(max_length, strategy="longest_first",
                               direction=getattr(tokenizer, "truncation_side", "right") or "right")
        ids = encoder(rust)
        want = reference_ids(tokenizer, PROBES, max_length)
        if ids(PROBES) != want:
            log.info("tokenizer fast path off: the Rust tokenizer's ids differ from transformers' on the probes")
            return None
        ids.rust = rust  # type: ignore[attr-defined]
        return ids
    except Exception as e:  # noqa: BLE001 - any surprise: keep the transformers call
        log.info("tokenizer fast path off: %s: %s", type(e).__name__, e)
        return None


def encoder(rust: Any) -> Callable[[Sequence[str]], list[list[int]]]:
    """texts -> ids from a Rust tokenizer already set up (truncation, no padding), without offsets."""
    encode = getattr(rust, "encode_batch_fast", None) or rust.encode_batch

    def ids(texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in encode(list(texts))]

    return ids
