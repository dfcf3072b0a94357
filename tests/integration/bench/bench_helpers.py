"""Shared fixtures: real servers on free loopback ports, always stopped afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[3]
STUB = ROOT / "tests" / "fixtures" / "openai_stub.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} not listening after {timeout} s")


def stop(proc: subprocess.Popen, group: bool = False) -> None:
    """Terminate (then kill) a server; group=True also ends its children (started with start_new_session)."""
    import signal

    import psutil

    def send(sig: int) -> None:
        try:
            if group:
                os.killpg(proc.pid, sig)
            elif proc.poll() is None:
                proc.send_signal(sig)
        except ProcessLookupError:
            pass

    try:  # every descendant, found while the parent lives, in case one left the process group
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:  # already gone
        kids = []
    send(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    send(signal.SIGKILL)
    proc.wait(timeout=10)
    for k in kids:  # a busy-polling survivor would starve the timing tests that run next
        try:
            k.kill()
        except psutil.Error:  # already gone
            pass
    psutil.wait_procs(kids, timeout=10)

def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "infertune.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float, log: Path, fallback: str | None = None) -> None:
    """Poll url until 200; if it answers 404 (route absent), poll fallback instead."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; last log:\n{log.read_text()[-3000:]}")
        try:
            code = httpx.get(url, timeout=2).status_code
            if code == 200:
                return
            if code == 404 and fallback:
                url, fallback = fallback, None
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{url} not healthy after {timeout} s; last log:\n{log.read_text()[-3000:]}")


# --- an SLO search against a real server: shared by tests/integration/bench and benchmarks/slo_repeat.py ---
def one_at_a_time(url: str) -> tuple[float, float]:
    """(P50 latency ms, requests/s) of the server answering one embeddings request at a time, on this box
    now."""
    from infertune.bench.config import BenchConfig
    from infertune.bench.runner import bench

    # 1 s of warm-up: the server's first requests of each padded length build their kernels
    cfg = BenchConfig(url=url, api="embeddings", concurrency=[1], duration=2, warmup=1, metrics_url="")
    p = bench(cfg).points[0]
    assert p.ok > 0 and p.errors.total == 0, (p.errors, p.warning)
    return p.latency_ms.p50, p.achieved_rps


def capacity(url: str) -> float:
    """Requests/s the server completes with 16 requests always in flight (closed loop, so no queue beyond
    them): its capacity on this box now. Its batches are as full as they get, so an open-loop rate the server
    sustains is near it, and rarely above."""
    from infertune.bench.config import BenchConfig
    from infertune.bench.runner import bench

    cfg = BenchConfig(url=url, api="embeddings", concurrency=[16], duration=3, warmup=1, metrics_url="")
    p = bench(cfg).points[0]
    assert p.ok > 0 and p.errors.total == 0, (p.errors, p.warning)
    return p.achieved_rps


def sustained(points, fallback: float) -> tuple[float, str]:
    """The rate the server completed while overloaded in one search: the median completion rate of the points
    that fell behind (completions < 95% of sends, so the server ran flat out for the whole window). Without
    such a point (every failure was on latency alone), `fallback` (a closed-loop capacity)."""
    import statistics

    behind = sorted(p.achieved_rps for p in points
                    if p.offered.rate and p.client.sent_rps > 0 and p.achieved_rps < 0.95 * p.client.sent_rps)
    if not behind:
        return fallback, "no overloaded point: the closed-loop capacity"
    return float(statistics.median(behind)), f"median of {len(behind)} overloaded points {behind}"


def assert_search_consistent(res, tolerance: float) -> None:
    """What an --slo search's answer is, whatever the box's speed: a load that was measured and passed at
    least `repeats` times, bracketed from above by a measured load that failed, within the tolerance."""
    s = res.slo
    assert s is not None and s.met and s.max_load is not None, s
    runs: dict[float, list[bool]] = {}
    for p in res.points:
        if p.offered.rate is not None and p.slo_pass is not None:
            runs.setdefault(p.offered.rate, []).append(p.slo_pass)
    assert runs.get(s.max_load, []).count(True) >= s.repeats >= 2, (s.max_load, runs, s.steps)
    lo, hi = s.bracket
    assert lo == s.max_load, s.bracket
    assert hi is not None and hi > lo and hi / lo <= 1 + tolerance + 1e-9, (s.bracket, s.steps)
    assert False in runs.get(hi, []), (hi, runs, s.steps)
    assert len(s.steps) == sum(len(v) for v in runs.values()), (s.steps, runs)  # each step is a point
