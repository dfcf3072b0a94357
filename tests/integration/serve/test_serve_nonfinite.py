"""A model that emits NaN on some inputs (the test fault plugin: inputs holding NAN_MARKER) behind a real
`infertune serve`: the request holding such an input gets a 500 naming its index and the likely cause, a
request batched beside it is answered, /metrics counts the row, alike in both topologies; and
`infertune validate`'s finite-output drill passes on the healthy server and fails on inputs that come out NaN."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from serve_helpers import NAN_MARKER, ROOT, embed, metric

COUNTER = "infertune_nonfinite_rows_total"


def _check_nan_request(url: str, model: str, bad_inputs: list[str], good_inputs: list[str], index: int,
                       blocker: list[str]) -> None:
    before = metric(url, COUNTER)
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(embed, url, blocker, model)  # holds the engine: the next two queue into one window
        time.sleep(0.05)
        bad = pool.submit(embed, url, bad_inputs, model)
        good = pool.submit(embed, url, good_inputs, model)
        first, bad, good = first.result(), bad.result(), good.result()
    assert first.status_code == 200, first.text
    assert bad.status_code == 500, bad.text
    err = bad.json()["error"]
    assert err["code"] == "nonfinite_embedding" and err["type"] == "server_error"
    assert err["message"] == (f"non-finite values in the embedding of input {index} (NaN); a fp16 overflow is the "
                              "usual cause: try bf16 (tune with --candidates bf16) or fp32"), err["message"]
    assert good.status_code == 200, good.text
    rows = np.array([d["embedding"] for d in good.json()["data"]], dtype=np.float64)
    assert rows.shape[0] == len(good_inputs) and np.isfinite(rows).all()
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    assert metric(url, COUNTER) == before + 1


@pytest.mark.parametrize("flags", [(), ("--frontends", "2")], ids=["thread", "processes"])
def test_a_nan_row_fails_only_its_request_naming_the_input(fake_server, flags):
    srv = fake_server(*flags, us_per_token=200, faults=True)
    mode = httpx.get(srv.url + "/ready", timeout=5).json()["worker"]["mode"]
    assert mode == ("processes" if flags else "thread")
    _check_nan_request(srv.url, "fake", ["a b", "c", "d e f", f"g {NAN_MARKER} h", "b"], ["x y", "z"], 3,
                       blocker=["a " * 400])
    ok = embed(srv.url, ["a b", "c"], "fake")  # and the server goes on serving
    assert ok.status_code == 200


def test_minilm_nan_row_fails_only_its_request(minilm_server):
    _check_nan_request(minilm_server.url, "minilm", ["an ordinary sentence", f"this one {NAN_MARKER} overflows"],
                       ["a batch-mate that is fine", "and another"], 1, blocker=["a long one " * 60])
    text = httpx.get(minilm_server.url + "/metrics", timeout=10).text
    assert f"# TYPE {COUNTER} counter" in text


def _validate(url: str, out, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "infertune.cli.main", "validate", url, "--peak", "1", "--soak", "0",
                           "--no-long-tail", "--faults", "finite-output", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=600, env=env)


def _drill(out) -> dict:
    (d,) = json.loads((out / "validate.json").read_text())["drills"]
    assert d["name"] == "finite-output"
    return d


def test_finite_output_drill_passes_on_the_healthy_server(minilm_server, tmp_path):
    from infertune.workloads.texts import sample_path

    # the default workload's first 32 requests: enough distinct texts for the drill (16), and some over the model's
    # limit for the screening to drop; the whole default (941 requests, 511 of them screened one by one) cost
    # 40 s of MiniLM here and proves nothing more about this drill
    work = tmp_path / "work.jsonl"
    work.write_text("".join(sample_path().read_text().splitlines(keepends=True)[:32]))
    r = _validate(minilm_server.url, tmp_path / "v", "--workload", str(work))
    assert r.returncode == 0, r.stderr[-3000:]
    d = _drill(tmp_path / "v")
    assert d["passed"] is True, d["reason"]
    ev = d["evidence"]
    assert ev["nonfinite_returned"] == ev["nonfinite_reported"] == ev["errors"] == []
    assert ev["answered_finite"] >= 11 and "repeated_word" in ev["inputs"] and "workload[15]" in ev["inputs"]
    screening = json.loads((tmp_path / "v" / "validate.json").read_text())["target"]["workload"]["screening"]
    assert screening["screened"] > 0 and screening["dropped"] > 0, screening


def test_finite_output_drill_fails_naming_the_inputs_that_come_out_nan(minilm_server, tmp_path):
    work = tmp_path / "work.jsonl"
    texts = ["what is the capital of france", f"a text that {NAN_MARKER} overflows", "an ordinary question"]
    work.write_text("".join(json.dumps({"input": t}) + "\n" for t in texts))
    r = _validate(minilm_server.url, tmp_path / "v", "--workload", str(work))
    assert r.returncode == 1, r.stderr[-3000:]
    d = _drill(tmp_path / "v")
    assert d["passed"] is False
    ev = d["evidence"]
    assert ev["nonfinite_reported"] == ["workload[1]"], d["reason"]
    assert ev["inputs"]["workload[1]"] == {"chars": len(texts[1]), "alone": "nonfinite_reported",
                                           "together": "nonfinite_reported"}
    assert ev["inputs"]["workload[0]"]["alone"] == "ok" and "workload[1]" in d["reason"]
    assert "FAILED: finite-output" in r.stderr
