"""GET /ready's answer: whether to route traffic here, and what a client or `infertune validate` needs to know
(the settings, the backend, the tokenizer, the model worker, the limits)."""

from __future__ import annotations

import os
from typing import Any

from infertune.serve.schema import ApiError


def ready_answer(st: Any) -> dict[str, Any]:
    """The answer once the model is loaded and its worker up; ApiError(503) while draining, loading,
    failed or restarting."""
    cfg = st.cfg
    if st.draining:
        raise ApiError(503, "the server is shutting down (draining): it still answers requests it "
                       "accepts, but route new traffic elsewhere", type="server_error")
    if st.load_error is not None:
        raise ApiError(503, f"model failed to load: {st.load_error}", type="server_error")
    if st.engine is None:
        raise ApiError(503, "model is loading and warming up; poll GET /ready", type="server_error",
                       headers={"Retry-After": "1"})
    worker = _worker(st)
    if worker.get("up") is False:
        raise ApiError(503, f"the model worker is restarting (restart {worker.get('restarts')}); poll GET /ready",
                       type="server_error", headers={"Retry-After": "1"})
    return {"status": "ready", "model": st.served[0], "load_s": st.load_s,
            "settings": st.settings.model_dump(), "backend": _describe(st.embedder),
            "tokenizer": _tokenizer(st.embedder), "worker": worker,
            "limits": {"max_queue": cfg.max_queue, "max_items_per_request": cfg.max_items_per_request,
                       "max_body_bytes": cfg.max_body_bytes, "request_timeout_s": cfg.request_timeout_s,
                       "max_wait_s": st.settings.max_wait_s, "rate_limit_per_key": cfg.rate_limit,
                       "max_input_tokens": st.embedder.spec.max_length, "truncate": cfg.truncate}}


def _worker(st: Any) -> dict[str, Any]:
    return st.topology or {"mode": "thread", "pid": os.getpid(), "restarts": 0}


def _describe(emb: Any) -> dict[str, Any]:
    try:
        d = emb.describe()
        return {k: v for k, v in d.items() if k != "leaf_modules"}
    except Exception:  # noqa: BLE001
        return {}


def _tokenizer(emb: Any) -> dict[str, Any]:
    """Which tokenizer gives this process's token ids (fast_tokens.py): tokie, the Rust tokenizer or transformers."""
    try:
        enc = emb.token_encoder()
    except Exception:  # noqa: BLE001 - an embedder without one (a worker proxy, a fake)
        return {}
    return enc.describe() if enc is not None else {"tokenizer": "transformers"}
