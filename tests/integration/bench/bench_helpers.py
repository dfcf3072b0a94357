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
