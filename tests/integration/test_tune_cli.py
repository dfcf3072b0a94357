"""`infertune tune` end to end on the real MiniLM, through the CLI, as a user runs it."""

import json

import numpy as np
import pytest
from tune_helpers import TUNE_BUDGET_S, TUNE_SLO_MS, run_cli

from infertune.workloads.texts import load_workload


@pytest.mark.slow
def test_quick_tune_writes_contract_results_report_and_artifact(quick_run):
    r, out = quick_run
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)  # --json: stdout is only JSON
    assert json.loads((out / "results.json").read_text())["winner"]["name"] == res["winner"]["name"]
    assert {"baseline", "winner", "candidates", "environment", "config"} <= set(res)
    for c in res["candidates"]:
        assert {"name", "status", "reason", "items_per_s", "latency_ms", "accuracy"} <= set(c)
        assert c["status"] in ("ok", "failed", "skipped", "rejected")
        if c["status"] in ("ok", "rejected"):
            assert {"p50", "p95", "p99"} <= set(c["latency_ms"])
            assert {"cosine_mean", "cosine_min", "topk_overlap"} <= set(c["accuracy"])
    win = res["winner"]
    assert win["accuracy"]["cosine_mean"] >= 0.995 and win["accuracy"]["cosine_min"] >= 0.98
    # the SLO is checked on the P99 of batch medians over passes (docs/architecture.md: the SLO statistic)
    assert win["measurement"]["slo_p99_ms"] <= res["config"]["slo"]["p99_ms"] == TUNE_SLO_MS
    assert win["measurement"]["p99_per_pass_ms"] and win["latency_ms"]["p99"] >= win["latency_ms"]["p50"]
    assert res["workload"]["n_items"] == 1000 and res["workload"]["over_limit"] >= 20
    # the search: what this host is, what each candidate cost and how far it got, all inside the budget
    s = res["search"]
    stages = [x["stage"] for x in s["stages"]]
    assert s["capabilities"] and s["time_budget_s"] == TUNE_BUDGET_S and stages[:5] == [
        "reference", "probe", "refine", "full", "confirm"]
    assert all(x.startswith("late ") for x in stages[5:]), stages  # options put off for time, tried at the end
    # what each stage cost, per candidate and in all (the reference's verification among them)
    assert s["cost_s"]["verify"] > 0 and s["candidates"][res["reference"]]["cost_s"]["verify"] > 0
    # the budget bounds the run: no step starts past it, but one started in time may run long when other work
    # slows this host (199 s of 150 seen beside the suite's other worker), hence the margin
    assert s["phases_s"]["search"] <= 1.5 * TUNE_BUDGET_S and res["wall_s"] <= 1.5 * TUNE_BUDGET_S, s["phases_s"]
    for c in res["candidates"]:
        assert c["status"] == "skipped" or c["time_s"] is not None, c["name"]
        assert c["status"] == "skipped" or c["stage"] in ("prepare", "probe", "full", "confirm"), c["name"]
    assert win["stage"] in ("full", "confirm") and win["why_tried"]
    eng = "/".join(win["name"].split("/")[:-1])
    assert eng in s["refine"] and s["refine"][eng]["chosen_tokens"] == win["candidate"]["batching"]["size"]
    html = (out / "report.html").read_text()
    assert "<svg" in html and "Pareto" in html and "http" not in html.split("<body>")[1][:200]
    assert (out / "artifact" / "manifest.json").exists()
    assert "infertune serve" in r.stderr
    # plan's prediction for this host beside the winner's measurement, each with its error (plan/measured.py)
    pvm = {x["quantity"]: x for x in res["predicted_vs_measured"]}
    assert list(pvm) == ["tokens/s bound", "items/s bound", "weight memory", "peak memory"]
    items = pvm["items/s bound"]
    assert items["measured"] == win["items_per_s"] and items["predicted"] > 0
    assert items["error_pct"] == pytest.approx((items["predicted"] - items["measured"]) / items["measured"] * 100)
    assert pvm["peak memory"]["measured"] == win["measurement"]["peak_rss_mb"]
    assert "Predicted vs measured" in html and "predicted vs measured: items/s bound" in r.stderr


@pytest.mark.slow
def test_artifact_reproduces_the_tuned_candidate(quick_run, user_jsonl):
    """The artifact gives the vectors of the candidate tune measured: the candidate prepared again here, with the
    calibration texts tune gave it (a static int8 winner's ranges come from them; an AVX2-only box picks one)."""
    from infertune.artifact import read_manifest
    from infertune.config import Candidate
    from infertune.engines.embedding_artifact import load_embedder
    from infertune.models.embedding import embedding_spec, load_tokenizer
    from infertune.registry import load_backend
    from infertune.workloads.buckets import stratified_split, stratified_subsample

    _, out = quick_run
    art = out / "artifact"
    m = read_manifest(art)
    items = load_workload(user_jsonl).items
    texts = items[:40]
    served = load_embedder(art).embed(texts)
    cand = Candidate.model_validate(m["candidate"])
    spec = embedding_spec("minilm")
    cfg = json.loads((out / "results.json").read_text())["config"]  # tune's split of the workload (--quick)
    lengths = [len(x) for x in load_tokenizer(spec)(items, truncation=False)["input_ids"]]
    calib, _ = stratified_split(lengths, cfg["eval_fraction"], cfg["seed"])
    calib = [items[i] for i in stratified_subsample(calib, lengths, 32, cfg["seed"])]
    direct = load_backend(cand.backend).prepare(spec, cand, "cpu", out / "w", calib).embed(texts)
    cos = (served * direct).sum(1) / np.linalg.norm(served, axis=1) / np.linalg.norm(direct, axis=1)
    assert cos.min() >= 0.9999


@pytest.mark.parametrize("content,needle", [
    ('{"input": "fine"}\n{"input": "oops",}\n', ":2: invalid JSON"),
    ('{"input": "fine"}\n{"body": "no input field"}\n', ':2: no "input" or "text" field'),
    ('{"input": "fine"}\n\n{"input": ["a", 3]}\n', ":3: field 'input' must be a string"),
])
def test_malformed_workload_exits_2_with_file_and_line(tmp_path, content, needle):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    r = run_cli("tune", "--workload", str(p), "--out", str(tmp_path / "o"), timeout=120)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "bad.jsonl" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_model_and_flags_exit_2(tmp_path):
    r = run_cli("tune", str(tmp_path / "nope"), timeout=60)
    assert r.returncode == 2 and "neither a known alias" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("tune", "--min-cosine", "3", timeout=60)
    assert r.returncode == 2 and "min_cosine_mean" in r.stderr
    r = run_cli("tune", "--device", "tpu", timeout=60)
    assert r.returncode == 2 and "cpu or cuda" in r.stderr


def test_sigterm_stops_tune_and_every_worker_process_it_started(tmp_path, user_jsonl):
    """A job's timeout or `kill` sends SIGTERM: tune stops like on Ctrl-C, exit 143, and no candidate's worker
    process (or a server it started) is left running and holding memory."""
    import signal
    import subprocess
    import time

    import psutil
    from tune_helpers import CLI, ENV

    log = tmp_path / "tune.log"
    with log.open("w") as err:
        p = subprocess.Popen([*CLI, "tune", "minilm", "--workload", str(user_jsonl), "--quick", "--time-budget", "120",
                              "--out", str(tmp_path / "run")], stdout=subprocess.DEVNULL, stderr=err, env=ENV)
    me, kids, deadline = psutil.Process(p.pid), [], time.monotonic() + 240
    try:
        while time.monotonic() < deadline and p.poll() is None:
            kids = me.children(recursive=True)
            if "preparing" in log.read_text() and kids:
                break
            time.sleep(0.5)
        assert p.poll() is None and kids, f"tune never started a worker: {log.read_text()[-2000:]}"
        time.sleep(2)
        kids = me.children(recursive=True)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    _, alive = psutil.wait_procs(kids, timeout=30)
    assert rc == 143, log.read_text()[-2000:]
    assert not alive, [(k.pid, " ".join(k.cmdline())[:120]) for k in alive]
