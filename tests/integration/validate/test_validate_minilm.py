"""The kill-worker drill on the real MiniLM: `infertune serve minilm --worker-process` under load, the worker
SIGKILLed; the server must answer again by itself within 30 s, fail the affected requests cleanly (503 or
429) and never leave one hanging until the client's timeout."""

from __future__ import annotations

import json
import sys

import pytest
from validate_helpers import run_cli, short_workload


@pytest.mark.slow
def test_kill_worker_on_minilm(tmp_path):
    out = tmp_path / "v"
    work = short_workload(tmp_path / "short.jsonl")  # nothing to screen against the 256-token limit
    # 0.8 x 3 = 2.4 req/s: well under what MiniLM serves on a busy 2-core box, so every failure is the kill's
    r = run_cli("validate", "minilm", "--peak", "3", "--soak", "0", "--no-long-tail", "--faults", "kill-worker",
                "--workload", str(work), "--timeout", "30", "--out", str(out))
    print(r.stderr[-2500:], file=sys.stderr)
    data = json.loads((out / "validate.json").read_text())
    d = {x["name"]: x for x in data["drills"]}["kill-worker"]
    ev = d["evidence"]
    print(f"kill-worker on MiniLM: recovery {ev['recovery_s']} s, /ready again {ev['ready_again_s']} s, "
          f"{ev['failed_requests']}/{ev['requests']} failed, max latency {ev['max_latency_ms']} ms; load average "
          f"{data['load_average']}", file=sys.stderr)
    assert r.returncode == 0 and d["passed"], d["reason"]
    assert ev["recovery_s"] is not None and ev["recovery_s"] <= 30
    assert ev["hung_requests"] == 0 and ev["max_latency_ms"] < 30_000
    assert ev["worker_restarts_delta"] == 1 and ev["errors_after_recovery"] == 0
