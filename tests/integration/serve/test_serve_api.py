"""`infertune serve` over real sockets: served vectors equal direct ones, malformed requests get OpenAI-shaped
4xx errors and the server keeps answering, a failing batch fails only its requests, /metrics parses and moves."""

from __future__ import annotations

import base64
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from serve_helpers import FAULT_MARKER, bench, cos_rows, embed, metric


@pytest.fixture(scope="module")
def direct():
    from infertune.engines.embedding_artifact import load_model

    return load_model("minilm", "cpu")


def _vectors(resp: httpx.Response) -> np.ndarray:
    assert resp.status_code == 200, resp.text
    data = resp.json()["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    return np.array([d["embedding"] for d in data], dtype=np.float32)


def test_served_equals_direct_same_order(minilm_server, direct):
    url = minilm_server.url
    pool_ = list(dict.fromkeys(bench.sample_texts(1)))[:80]  # unique, so order is checkable
    texts = [t for t, n in zip(pool_, direct.count_tokens(pool_), strict=True) if n <= direct.spec.max_length][:40]
    assert len(texts) == 40
    want = direct.embed(texts)
    # one request holding 16 items, and 24 single-item requests at once (they get batched together)
    many = _vectors(embed(url, texts[:16]))
    with ThreadPoolExecutor(24) as pool:
        singles = list(pool.map(lambda t: _vectors(embed(url, t))[0], texts[16:]))
    got = np.vstack([many, np.array(singles)])
    cos = cos_rows(got, want)
    print(f"served vs direct, n={len(cos)}: cosine min {cos.min():.7f}, mean {cos.mean():.7f}", file=sys.stderr)
    assert cos.min() >= 0.9999, cos.min()
    # order: each served vector is closest to its own input's direct vector
    assert (np.argmax(got @ want.T, axis=1) == np.arange(len(texts))).all()
    # base64 encoding carries the same float32 values
    r = embed(url, texts[:3], encoding_format="base64")
    b64 = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]])
    assert np.abs(b64 - many[:3]).max() < 1e-6
    # token-id input (the model's own ids, special tokens included) gives the same vectors
    ids = direct.token_ids(texts[:4])
    r = embed(url, ids)
    assert cos_rows(_vectors(r), want[:4]).min() >= 0.9999
    assert r.json()["usage"]["prompt_tokens"] == sum(len(x) for x in ids)


def test_models_health_ready(minilm_server):
    url = minilm_server.url
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    ready = httpx.get(url + "/ready").json()
    assert ready["status"] == "ready" and ready["settings"]["batch_tokens"] > 0
    models = httpx.get(url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "minilm"


LONG = "word " * 600  # > 256 tokens, MiniLM's limit
MALFORMED = [
    # (id, kwargs for httpx.request, expected status)
    ("bad-json", dict(content=b'{"model": "minilm", "input": ', headers={"content-type": "application/json"}), 400),
    ("json-array", dict(json=[]), 400),
    ("json-string", dict(json="hello"), 400),
    ("json-null", dict(content=b"null", headers={"content-type": "application/json"}), 400),
    ("not-utf8", dict(content=b"\xff\xfe\xfa", headers={"content-type": "application/json"}), 400),
    ("deep-nesting", dict(content=b"[" * 100000 + b"]" * 100000, headers={"content-type": "application/json"}), 400),
    ("missing-input", dict(json={"model": "minilm"}), 400),
    ("missing-model", dict(json={"input": "hi"}), 400),
    ("model-int", dict(json={"model": 3, "input": "hi"}), 400),
    ("unknown-model", dict(json={"model": "text-embedding-3-small", "input": "hi"}), 404),
    ("input-int", dict(json={"model": "minilm", "input": 5}), 400),
    ("input-null", dict(json={"model": "minilm", "input": None}), 400),
    ("input-object", dict(json={"model": "minilm", "input": {"text": "hi"}}), 400),
    ("input-empty-list", dict(json={"model": "minilm", "input": []}), 400),
    ("input-empty-string", dict(json={"model": "minilm", "input": ""}), 400),
    ("input-empty-string-in-list", dict(json={"model": "minilm", "input": ["ok", ""]}), 400),
    ("input-mixed", dict(json={"model": "minilm", "input": ["ok", 1]}), 400),
    ("input-list-and-str", dict(json={"model": "minilm", "input": [[1, 2], "a"]}), 400),
    ("input-empty-ids", dict(json={"model": "minilm", "input": [[]]}), 400),
    ("input-ids-with-str", dict(json={"model": "minilm", "input": [[101, "x"]]}), 400),
    ("input-negative-id", dict(json={"model": "minilm", "input": [-1]}), 400),
    ("input-id-out-of-vocab", dict(json={"model": "minilm", "input": [10**9]}), 400),
    ("input-bools", dict(json={"model": "minilm", "input": [True, False]}), 400),
    ("input-floats", dict(json={"model": "minilm", "input": [1.5, 2.0]}), 400),
    ("too-many-items", dict(json={"model": "minilm", "input": ["a"] * 65}), 400),
    ("over-length-text", dict(json={"model": "minilm", "input": ["ok", LONG]}), 400),
    ("over-length-ids", dict(json={"model": "minilm", "input": [[101] * 300]}), 400),
    ("bad-encoding", dict(json={"model": "minilm", "input": "hi", "encoding_format": "binary"}), 400),
    ("encoding-not-string", dict(json={"model": "minilm", "input": "hi", "encoding_format": 1}), 400),
    ("dimensions-too-many", dict(json={"model": "minilm", "input": "hi", "dimensions": 385}), 400),
    ("dimensions-zero", dict(json={"model": "minilm", "input": "hi", "dimensions": 0}), 400),
    ("dimensions-string", dict(json={"model": "minilm", "input": "hi", "dimensions": "384"}), 400),
    ("user-not-string", dict(json={"model": "minilm", "input": "hi", "user": 5}), 400),
    ("huge-body", dict(json={"model": "minilm", "input": ["x" * 1000] * 1100}), 413),
    ("text-plain", dict(content=b'{"model":"minilm","input":"hi"}', headers={"content-type": "text/plain"}), 415),
    ("no-content-type", dict(content=b'{"model":"minilm","input":"hi"}'), 415),
    ("form-encoded", dict(data={"model": "minilm", "input": "hi"}), 415),
]


@pytest.mark.parametrize("case,kwargs,status", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_request_gets_openai_error(minilm_server, case, kwargs, status):
    r = httpx.request("POST", minilm_server.url + "/v1/embeddings", timeout=60, **kwargs)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"]
    if case.startswith("over-length"):
        assert "256" in err["message"] and err["code"] == "context_length_exceeded"
    assert embed(minilm_server.url, "still answering").status_code == 200


@pytest.mark.parametrize("method,path,status", [("POST", "/v1/embedding", 404), ("GET", "/nope", 404),
                                                 ("GET", "/v1/embeddings", 405), ("DELETE", "/v1/models", 405)])
def test_unknown_route_or_method(minilm_server, method, path, status):
    r = httpx.request(method, minilm_server.url + path)
    assert r.status_code == status and r.json()["error"]["message"]
    assert httpx.get(minilm_server.url + "/health").status_code == 200


def test_over_length_truncated_with_flag(fake_server):
    srv = fake_server("--truncate")
    r = embed(srv.url, ["a " * 600], model="fake")
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 512


def test_failed_batch_fails_only_its_requests(minilm_server):
    url = minilm_server.url
    before = metric(url, "infertune_batch_failures_total")
    r = embed(url, f"this one breaks the forward pass {FAULT_MARKER}")
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert metric(url, "infertune_batch_failures_total") == before + 1
    ok = embed(url, ["and the server keeps serving", "two items"])
    assert ok.status_code == 200 and len(ok.json()["data"]) == 2


def test_api_key_guards_all_but_health(fake_server):
    srv = fake_server("--api-key", "s3cret", headers={"Authorization": "Bearer s3cret"})
    assert httpx.get(srv.url + "/health").status_code == 200
    for path in ("/v1/models", "/metrics", "/ready"):
        r = httpx.get(srv.url + path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert embed(srv.url, "a b", model="fake").status_code == 401
    ok = httpx.post(srv.url + "/v1/embeddings", json={"model": "fake", "input": "a b"},
                    headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200


def test_metrics_parse_and_move(minilm_server):
    url = minilm_server.url
    req0 = metric(url, "infertune_requests_total", route="/v1/embeddings", status="200")
    items0 = metric(url, "infertune_items_total")
    batches0 = metric(url, "infertune_batch_size_items_count")
    stage0 = {s: metric(url, "infertune_stage_seconds_count", stage=s) for s in ("tokenize", "queue", "forward",
                                                                                 "postprocess")}
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: embed(url, [f"metrics item {i}", "second"]).status_code, range(8)))
    assert codes == [200] * 8
    assert metric(url, "infertune_requests_total", route="/v1/embeddings", status="200") == req0 + 8
    assert metric(url, "infertune_items_total") == items0 + 16
    assert metric(url, "infertune_batch_size_items_count") > batches0
    for s, v in stage0.items():
        assert metric(url, "infertune_stage_seconds_count", stage=s) > v, s
    assert metric(url, "infertune_batch_padding_ratio_count") > 0
    assert metric(url, "infertune_queue_depth") == 0
    assert metric(url, "infertune_ready") == 1


def test_openai_client_dimensions_are_the_first_n_renormalised(minilm_server, direct):
    """The official `openai` client against serve: `dimensions=256` gives 256-dim unit vectors equal to the
    first 256 of the full vector, renormalised (Matryoshka shortening, as OpenAI's text-embedding-3 does)."""
    from openai import OpenAI

    client = OpenAI(base_url=minilm_server.url + "/v1", api_key="unused", max_retries=0)
    texts = ["a cat sat on the mat", "quarterly revenue rose 4% on cloud demand", "¿dónde está la biblioteca?"]
    full = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    short = client.embeddings.create(model="minilm", input=texts, dimensions=256, encoding_format="float")
    f = np.array([d.embedding for d in full.data], dtype=np.float32)
    s = np.array([d.embedding for d in short.data], dtype=np.float32)
    assert f.shape == (3, direct.spec.dim) and s.shape == (3, 256)
    want = f[:, :256] / np.linalg.norm(f[:, :256], axis=1, keepdims=True)
    print(f"dimensions=256: norms {np.linalg.norm(s, axis=1)}, max |diff| vs renormalised prefix "
          f"{np.abs(s - want).max():.2e}", file=sys.stderr)
    assert np.allclose(np.linalg.norm(s, axis=1), 1.0, atol=1e-5)
    assert np.abs(s - want).max() < 1e-5
    # the client's default (base64) path decodes to the same 256 floats
    b64 = client.embeddings.create(model="minilm", input=texts[:1], dimensions=256)
    assert np.abs(np.array(b64.data[0].embedding, dtype=np.float32) - s[0]).max() < 1e-6
    # out of range: OpenAI-shaped 400 naming the field
    r = httpx.post(minilm_server.url + "/v1/embeddings", json={"model": "minilm", "input": "x", "dimensions": 385})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions", r.text
