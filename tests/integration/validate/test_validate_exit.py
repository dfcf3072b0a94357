"""validate's verdicts end to end: nothing listening at the URL is said within seconds, and a
soak whose latency breaks the SLO is not a PASS (exit 4). About 12 s on the 2-core box."""

from __future__ import annotations

import json
import time

from validate_helpers import run_cli, short_workload


def test_nothing_listening_exits_2_within_seconds_naming_the_url():
    # validate gives a URL where nothing accepts connections 3 s, not the 600 s a server it starts gets
    # (ValidateConfig.ready_timeout_s). The rest is the CLI's start, 1.5 s on a quiet box and 4.5 s beside two
    # CPU hogs: a 30 s bound is 20x below the wait it guards against, and no busy box makes Python start take
    # 27 s.
    t0 = time.monotonic()
    r = run_cli("validate", "http://127.0.0.1:9", timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-2000:]
    assert took < 30, f"took {took:.1f} s"
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: nothing answers at http://127.0.0.1:9"), r.stderr
    assert "for 3 s)" in last, last  # the unreachable window, not the ready timeout, ended it


def test_a_soak_over_the_slo_is_not_a_pass(fake_artifact, tmp_path):
    out = tmp_path / "v"
    # the fake backend takes ~1 ms a request; no server answers in 0.05 ms: the SLO is missed for sure. Drift is
    # not what this checks: a loaded box drifted a 4 s soak 1.76x, a failure (exit 1) beside the SLO miss. 2 s (3
    # P99 windows of ~13 requests) is as short as a soak gets and misses 0.05 ms all the same
    r = run_cli("validate", str(fake_artifact()), "--peak", "20", "--soak", "2s", "--slo", "p99_e2e_ms<=0.05",
                "--max-p99-drift", "1000", "--no-long-tail", "--faults", "none", "--sample-interval", "0.5",
                "--workload", str(short_workload(tmp_path / "short.jsonl")), "--out", str(out), timeout=120)
    assert r.returncode == 4, r.stderr[-3000:]
    assert "PASSED" not in r.stderr and "all drills passed" not in r.stderr
    assert "verdict: SLO NOT MET" in r.stderr and "(exit 4)" in r.stderr
    data = json.loads((out / "validate.json").read_text())
    assert data["passed"] is False and data["slo_met"] is False and data["exit_code"] == 4
    soak = next(d for d in data["drills"] if d["name"] == "soak")
    assert soak["passed"] is False and soak["reason"].startswith("SLO not met: p99_e2e_ms")
    assert soak["evidence"]["errors"] == 0  # the server held up: only the promise was broken
