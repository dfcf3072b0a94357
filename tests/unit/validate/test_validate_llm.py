"""validate on an LLM server: streamed completions (TTFT/TPOT), the long tail's over-limit prompt, vLLM's
limits read from /v1/models, and the kill drill's budget and verdict (fakes; the real vLLM is in
tests/integration/llm/test_validate_vllm.py)."""

import json
import math
from pathlib import Path

from infertune.bench.records import Record
from infertune.validate.config import ValidateConfig
from infertune.validate.engine_kill import LLM_RECOVERY_BUDGET_S, _judge, budget
from infertune.validate.load import _spec_base, summarize, token_latency
from infertune.validate.longtail import buckets
from infertune.validate.target import models_info
from infertune.workloads.bodies import Requests


def rec(sched, first, done, out=8, error=""):
    return Record(sched, sched, first, done, error, "", out, 10, None)


def test_completions_are_streamed_and_embeddings_are_not():
    assert _spec_base("http://x", "completions", 0, 0, 1, 5)["stream"] is True
    assert _spec_base("http://x", "embeddings", 0, 0, 1, 5)["stream"] is False


def test_token_latency_is_ttft_and_time_per_token_after_the_first():
    ok = [rec(0.0, 0.2, 0.9, out=8), rec(1.0, 1.1, 1.8, out=8)]
    t = token_latency(ok)
    assert t["ttft_ok_ms"]["p50"] == 150.0  # 200 and 100 ms
    assert math.isclose(t["tpot_ok_ms"]["p50"], 100.0, rel_tol=1e-6)  # (700 ms) / 7 and (700 ms) / 7
    assert token_latency([rec(0.0, float("nan"), 0.1)]) == {}  # not streamed: no token figures
    assert "ttft_ok_ms" in summarize(ok + [rec(2.0, float("nan"), 2.1, error="http_5xx")], 30)


def test_vllm_models_answer_gives_the_input_limit():
    assert models_info({"data": [{"id": "m", "max_model_len": 2048}]}) == {"limits": {"max_input_tokens": 2048}}
    assert models_info({"data": [{"id": "m"}]}) == {} and models_info({"data": []}) == {}


def test_long_tail_over_limit_prompt_is_a_completion():
    bodies = [json.dumps({"model": "m", "prompt": "x " * n, "max_tokens": 16, "stream": True}).encode()
              for n in (5, 10, 50)]
    b = buckets(Requests(bodies, [5, 10, 50], [16] * 3, "test"), 2048)
    over = json.loads(b["over_limit"]["bodies"][0])
    assert "prompt" in over and "input" not in over and over["max_tokens"] == 1 and over["model"] == "m"
    assert len(over["prompt"].split()) == 3072


def test_recovery_budget_defaults_long_for_vllm_unless_given():
    assert budget(ValidateConfig(target="x"))[0] == LLM_RECOVERY_BUDGET_S
    assert budget(ValidateConfig(target="x", recovery_budget_s=45))[0] == 45


class FakeTarget:
    owned, log_path = True, None

    def __init__(self, alive=True):
        self._alive = alive
        self.proc = type("P", (), {"returncode": None if alive else 1})()

    def alive(self):
        return self._alive


def judge(recs, t_ready, alive=True):
    return _judge(FakeTarget(alive), recs, None, 10.0, t_ready, (111, [111, 112], 222 if t_ready else None),
                  (300.0, "default"), 2.0, None, ValidateConfig(target="x"), 0.0)


def test_kill_counts_failures_while_away_and_passes_once_back():
    recs = [rec(9.0, 9.1, 9.5), rec(10.5, float("nan"), 10.6, error="connect"),
            rec(40.0, 40.2, 40.8), rec(41.0, 41.1, 41.6)]
    d = judge(recs, t_ready=39.0)
    assert d.passed, d.reason
    ev = d.evidence
    assert ev["failed_requests"] == 1 and ev["recovery_s"] == 30.8 and ev["ready_again_s"] == 29.0
    assert ev["killed_pids"] == [111, 112] and ev["new_pid"] == 222


def test_kill_fails_when_vllm_never_comes_back_or_errors_after():
    d = judge([rec(10.5, float("nan"), 10.6, error="connect")], t_ready=None)
    assert not d.passed and "no new vLLM answered /health" in d.reason
    d = judge([rec(40.0, 40.2, 40.8), rec(41.0, float("nan"), 41.1, error="http_5xx")], t_ready=39.0)
    assert not d.passed and "1 error(s) after vLLM was back" in d.reason
    d = judge([rec(40.0, 40.2, 40.8)], t_ready=39.0, alive=False)
    assert not d.passed and "itself exited" in d.reason


def test_an_llm_artifact_brings_its_own_workload(tmp_path: Path):
    from infertune.validate.runner import _requests

    wl = tmp_path / "load.jsonl"
    wl.write_text('{"prompt": "Hello there", "max_tokens": 4}\n')
    req = _requests(ValidateConfig(target="x"), "completions", "m", wl)
    body = json.loads(req.bodies[0])
    assert body["prompt"] == "Hello there" and body["stream"] is True and body["max_tokens"] == 4


def test_llm_points_are_long_enough_for_streamed_completions_unless_given():
    from infertune.validate.config import LLM_POINT_S, point_s

    assert point_s(ValidateConfig(target="x"), "search_duration_s", "completions") == LLM_POINT_S
    assert point_s(ValidateConfig(target="x"), "step_s", "embeddings") == 5.0
    assert point_s(ValidateConfig(target="x", step_s=7), "step_s", "completions") == 7.0


def test_cli_leaves_server_dependent_defaults_to_the_server(monkeypatch):
    """--recovery-budget, --step, --search-duration not given: the config knows (an LLM gets its own defaults)."""
    from typer.testing import CliRunner

    import infertune.validate.runner as runner
    from infertune.cli.main import app

    seen = []

    def fake(cfg, log=None):
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(runner, "validate", fake)
    monkeypatch.setattr("infertune.extras.require", lambda *a, **k: None)
    CliRunner().invoke(app, ["validate", "http://127.0.0.1:9", "--peak", "1"])
    CliRunner().invoke(app, ["validate", "http://127.0.0.1:9", "--peak", "1", "--recovery-budget", "45s"])
    assert "recovery_budget_s" not in seen[0].model_fields_set and budget(seen[0])[0] == LLM_RECOVERY_BUDGET_S
    assert "step_s" not in seen[0].model_fields_set and seen[0].step_s == 5.0
    assert budget(seen[1])[0] == 45.0


def test_background_load_keeps_its_rate_when_every_request_fails_at_once():
    """While vLLM restarts, connections are refused at once: segments must not follow each other faster."""
    import time

    from infertune.validate.load import BackgroundLoad, Stream

    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 1}).encode()
    with BackgroundLoad("http://127.0.0.1:9", "completions", Stream("s", [body], [1], 2.0), 5.0) as bg:
        assert bg.segment_s == 2.0
        time.sleep(4.0)
        recs = bg.stop()
    assert recs and all(r.error for r in recs)
    assert len(recs) <= 2.0 * 6 + 2  # ~2 req/s over ~4-6 s, not a burst of instant retries


def test_serves_greedy_check_line_is_awaited_in_its_log_and_its_absence_is_an_error(tmp_path):
    import threading
    import time

    import pytest

    from infertune.errors import InfertuneError
    from infertune.validate.target import Target

    log = tmp_path / "server.log"
    log.write_text("starting vLLM: ...\nINFO: GET /health 200\n")
    t = Target("http://127.0.0.1:1", log_path=log, api="completions")

    def later():  # serve prints its line once the check is done, after /health answered
        time.sleep(0.3)
        with log.open("a") as f:
            f.write("greedy check: 16/16 recorded continuations reproduced exactly (token agreement 1.000)\n")

    threading.Thread(target=later).start()
    assert t._greedy_line(time.monotonic() + 10).startswith("greedy check: 16/16 recorded")
    log.write_text("INFO: nothing of it\n")
    with pytest.raises(InfertuneError, match="greedy check printed no line"):
        t._greedy_line(time.monotonic() + 0.6)


def test_a_server_that_exits_during_the_greedy_check_is_named_as_exited(tmp_path):
    import subprocess
    import time

    import pytest

    from infertune.errors import InfertuneError
    from infertune.validate.target import Target

    log = tmp_path / "server.log"
    log.write_text("starting vLLM: ...\n")
    proc = subprocess.Popen(["sh", "-c", "exit 3"])
    proc.wait()
    t = Target("http://127.0.0.1:1", proc=proc, log_path=log, api="completions")
    with pytest.raises(InfertuneError, match="exited with code 3 during serve's greedy check"):
        t._greedy_line(time.monotonic() + 10)
