"""Fixtures for the bench tests; plain helpers live in bench_helpers.py (unique module name)."""

import subprocess
import sys

import pytest
from bench_helpers import STUB, free_port, stop, wait_port  # noqa: F401


@pytest.fixture
def stub():
    """stub(mode, **flags) -> base URL of a running tests/fixtures/openai_stub.py."""
    procs: list[subprocess.Popen] = []

    def start(mode: str = "fast", **flags) -> str:
        port = free_port()
        args = [sys.executable, str(STUB), "--port", str(port), "--mode", mode]
        for k, v in flags.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        wait_port(port, p, 15)
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        stop(p)


