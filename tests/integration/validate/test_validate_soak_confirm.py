"""validate's confirm stage end to end on a real `infertune serve` of a fake-backend artifact: the
soak's rate is confirmed with a long point first, and the soak runs at the rate that point held. ~17 s."""

from __future__ import annotations

import json

import pytest
from validate_helpers import run_cli, short_workload


@pytest.mark.slow
def test_the_soak_runs_at_the_rate_its_confirm_point_held(fake_artifact, tmp_path):
    out = tmp_path / "v"
    # the fake backend answers a request in ~1-3 ms: 0.8 x 40 = 32 req/s holds a P99 of 1 s on any box
    r = run_cli("validate", str(fake_artifact()), "--peak", "40", "--soak-confirm", "3s", "--soak", "4s",
                # P99 over 0.5 s windows on a loaded 2-core box moves 1.5x without the server drifting (CI saw 1.54x
                # with 1.6 other cores busy): drift has its unit tests; this test is about the rate the soak runs at
                "--max-p99-drift", "5", "--slo", "p99_e2e_ms<=1000", "--no-long-tail", "--faults", "none",
                "--sample-interval", "0.5", "--workload", str(short_workload(tmp_path / "short.jsonl")),
                "--out", str(out), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "confirm: the soak's rate 32 req/s with 3 s points" in r.stderr
    assert "sustainable 32 req/s" in r.stderr
    data = json.loads((out / "validate.json").read_text())
    assert data["peak"]["rps"] == 40 and data["peak"]["sustainable_rps"] == 32
    steps = data["peak"]["confirm"]["steps"]
    assert len(steps) == 1 and steps[0]["passed"] and steps[0]["window_s"] == 3
    soak = next(d for d in data["drills"] if d["name"] == "soak")["evidence"]
    assert soak["rate_rps"] == 32 and soak["confirm"]["rate_rps"] == 32 and soak["confirm"]["duration_s"] == 3
    deg = soak["degradation"]
    assert deg["degraded"] is False and "verdict" not in deg and deg["confirm"] == soak["confirm"]
    # the confirm point met the SLO with the default margin (P99 <= 0.8 x 1000 ms), and its spreads were measured
    assert soak["confirm"]["margin"] == 0.8 and soak["confirm"]["slo_with_margin"] == "p99_e2e_ms<=800"
    assert set(deg["trends"]) == {"p99_ms", "queue_depth", "rss_mb"}
    assert soak["confirm"]["spread"]["p99_ms"] is not None and soak["confirm"]["spread"]["rss_mb"] is not None
    assert "Sustainable 32 req/s" in (out / "validate.html").read_text()
