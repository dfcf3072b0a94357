"""The one-process topology (serve/inproc.py): the engine client on an event loop and the batch core in a thread,
linked in-process, with a stand-in embedder (logic only, no HTTP): a loaded window is packed into fewer, larger
batches when the under-load budget allows it, every request gets its own rows, and the serving stack's domain
errors become the HTTP answers http.py maps them to."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from infertune.engines.base import Embedder
from infertune.serve.batch_core import BatchCore
from infertune.serve.engine_client import EngineClient
from infertune.serve.inproc import InprocInbox, InprocLink
from infertune.serve.metrics import Metrics
from infertune.serve.schema import EmbeddingRequest


class _Tok:
    pad_token_id = 0


class TenTokens(Embedder):
    """Every text is ten tokens of its own first character's code; a row's vector is [that code, length, 0, 0]."""

    def __init__(self, fail_code: int | None = None):
        super().__init__(SimpleNamespace(dim=4, max_length=64, normalize=False), _Tok(), "cpu")
        self.needs_token_types = False
        self.shapes: list[tuple[int, int]] = []
        self.fail_code = fail_code

    def token_ids(self, texts):
        return [[ord(t[0])] * 10 for t in texts]

    def forward(self, batch):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        self.shapes.append(ids.shape)
        if self.fail_code is not None and (ids == self.fail_code).any():
            raise RuntimeError("injected")
        return np.stack([ids[:, 0], mask.sum(1), 0 * ids[:, 0], 0 * ids[:, 0]], axis=1).astype(np.float32)


def _serve(emb, texts: list[str], max_batch_tokens: int) -> list:
    """Submit one request per text at once through client -> inbox -> core thread -> client; return the results
    (the rendered bodies, or the error each request raised)."""
    from infertune.serve.config import Settings

    st = Settings(batch_tokens=64, max_batch_tokens=max_batch_tokens, max_batch_items=256, max_wait_ms=50,
                  tokenize_workers=1, threads=None, device="cpu")
    inbox = InprocInbox()
    link = InprocLink(inbox)
    metrics = Metrics()
    core = BatchCore(emb, st, metrics, inbox, link.answer)
    stop = threading.Event()
    th = threading.Thread(target=core.loop, args=(stop,), daemon=True)
    th.start()

    async def go():
        client = await EngineClient(emb, 0, link, metrics, max_queue=512, truncate=False).start()
        client.set_engine(0, True)
        reqs = [EmbeddingRequest(texts=[t], ids=None, model="m", encoding_format="float") for t in texts]
        return await asyncio.gather(*(client.submit(r, "m", 10) for r in reqs), return_exceptions=True)

    try:
        return asyncio.run(go())
    finally:
        stop.set()
        th.join(10)


def _batches(max_batch_tokens: int) -> list[tuple[int, int]]:
    emb = TenTokens()
    out = _serve(emb, ["x"] * 32, max_batch_tokens)
    assert len(out) == 32 and all(isinstance(b, bytes) for b in out)
    return [(int(a), int(a * b)) for a, b in emb.shapes]


def test_a_loaded_window_is_packed_into_fewer_larger_batches():
    fixed = _batches(64)
    grown = _batches(256)
    assert all(tok <= 64 for _, tok in fixed) and sum(n for n, _ in fixed) == 32
    assert all(tok <= 256 for _, tok in grown) and sum(n for n, _ in grown) == 32
    assert max(n for n, _ in grown) > max(n for n, _ in fixed) and len(grown) < len(fixed)


def test_each_request_gets_its_own_row_and_a_failing_batch_only_its_requests():
    import json

    from infertune.serve.errors import BatchFailed

    texts = [chr(ord("a") + i % 26) for i in range(40)] + ["!"]
    out = _serve(TenTokens(fail_code=ord("!")), texts, 1 << 20)  # one window, one batch: all of it fails
    assert all(isinstance(r, BatchFailed) and "injected" in r.message for r in out)
    out = _serve(TenTokens(fail_code=ord("!")), texts, 64)  # six rows a batch: only the "!" batch fails
    failed = [t for t, r in zip(texts, out, strict=True) if isinstance(r, BatchFailed)]
    assert "!" in failed and len(failed) <= 6
    for t, r in zip(texts, out, strict=True):
        if isinstance(r, bytes):
            vec = json.loads(r)["data"][0]["embedding"]
            assert vec[:2] == [ord(t), 10.0]


@pytest.mark.parametrize(("kind", "status", "code"), [
    ("Overloaded", 429, "rate_limit_exceeded"), ("InputTooLong", 400, "context_length_exceeded"),
    ("EngineDown", 503, "worker_unavailable"), ("BatchFailed", 500, None), ("TimedOut", 504, "timeout")])
def test_http_alone_maps_domain_errors_to_statuses(kind, status, code):
    from infertune.serve.errors import from_wire, to_wire
    from infertune.serve.http import api_error

    err = from_wire((kind, "why"))
    assert type(err).__name__ == kind and to_wire(err) == (kind, "why")
    api = api_error(err)
    assert (api.status, api.code, api.message) == (status, code, "why")
    assert (api.headers.get("Retry-After") == "1") == (status in (429, 503))
