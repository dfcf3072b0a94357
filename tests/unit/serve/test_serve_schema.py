
"""Request parsing, response rendering and settings resolution for `serve` (no server, no model)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from infertune.serve.config import ServeConfig, resolve_settings
from infertune.serve.schema import ApiError, parse_request, render

KW = dict(served=["minilm"], dim=4, vocab_size=1000, max_length=8, max_items=3, truncate=False)


def parse(body, **kw):
    return parse_request(json.dumps(body).encode(), **{**KW, **kw})


def test_input_shapes():
    assert parse({"model": "minilm", "input": "hi"}).texts == ["hi"]
    assert parse({"model": "minilm", "input": ["a", "b"]}).texts == ["a", "b"]
    assert parse({"model": "minilm", "input": [1, 2, 3]}).ids == [[1, 2, 3]]
    assert parse({"model": "minilm", "input": [[1], [2, 3]]}).ids == [[1], [2, 3]]


def test_errors_name_the_problem():
    with pytest.raises(ApiError, match="limit is 3"):
        parse({"model": "minilm", "input": ["a"] * 4})
    with pytest.raises(ApiError, match="limit is 8 tokens") as e:
        parse({"model": "minilm", "input": [list(range(9))]})
    assert e.value.status == 400 and e.value.body()["error"]["code"] == "context_length_exceeded"
    with pytest.raises(ApiError) as e:
        parse({"model": "other", "input": "x"})
    assert e.value.status == 404


def test_token_ids_truncated_when_asked():
    assert parse({"model": "minilm", "input": [list(range(9))]}, truncate=True).ids == [list(range(8))]


def test_render_float_and_base64_agree():
    v = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    f = json.loads(render(v, "float", "m", 7))
    b = json.loads(render(v, "base64", "m", 7))
    assert f["usage"] == {"prompt_tokens": 7, "total_tokens": 7} and f["data"][1]["index"] == 1
    dec = np.array([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in b["data"]])
    assert np.array_equal(dec, v) and np.allclose(np.array([d["embedding"] for d in f["data"]]), v)


def test_settings_flag_beats_artifact_beats_default():
    manifest = {"device": "cpu", "tune": {"batch_token_budget": 2048, "batch_max_items": 64,
                                          "latency_ms": {"p50": 40.0}, "threads": 2}}
    s = resolve_settings(ServeConfig(max_batch_items=8), manifest)
    assert (s.batch_tokens, s.sources["batch_tokens"]) == (2048, "artifact")
    assert (s.max_batch_items, s.sources["max_batch_items"]) == (8, "flag")
    assert s.max_wait_ms == 4.0
    assert s.threads is None and s.sources["threads"] == "default"  # torch default: all cores
    d = resolve_settings(ServeConfig(device="cuda"), None)
    assert d.batch_tokens == 16384 and d.sources["batch_tokens"] == "default"


def test_import_is_light_and_serve_is_callable():
    import subprocess
    import sys

    code = ("import sys, infertune, infertune.serve; assert callable(infertune.serve); "
            "assert 'torch' not in sys.modules and 'fastapi' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_batches_grow_under_load_only_up_to_the_cap():
    s = resolve_settings(ServeConfig(), {"device": "cuda", "tune": {"batch_token_budget": 512}})
    assert (s.batch_tokens, s.max_batch_tokens, s.sources["max_batch_tokens"]) == (512, 2048, "default")
    c = resolve_settings(ServeConfig(), {"device": "cpu", "tune": {"batch_token_budget": 512}})
    assert c.max_batch_tokens == 512  # no growth on CPU by default
    off = resolve_settings(ServeConfig(max_batch_tokens=512), {"device": "cpu", "tune": {"batch_token_budget": 512}})
    assert off.max_batch_tokens == 512 and off.sources["max_batch_tokens"] == "flag"
    assert resolve_settings(ServeConfig(batch_tokens=4096, max_batch_tokens=100), None).max_batch_tokens == 4096
