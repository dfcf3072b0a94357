"""Workers are never forked from a server in which CUDA is initialised (worker.py, worker_preload.py).

Without a GPU the check is faked: a module preloaded before ours replaces torch.cuda.is_initialized, so the
fork server records what torchao's import does on a CUDA host. Each case runs in a fresh interpreter, because
multiprocessing keeps one fork server per process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from infertune.tuning import worker

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import json, os, sys
from infertune.tuning import worker
if sys.argv[2] == "fake":
    worker.PRELOAD.insert(0, "fake_cuda_init")
pids = [worker.run_isolated("os:getpid", {}, 300) for _ in range(2)]
print(json.dumps({"pids": pids, "parent": os.getpid(), **worker.start_method()}))
"""


def _run(tmp_path: Path, mode: str) -> tuple[dict, str]:
    (tmp_path / "fake_cuda_init.py").write_text("import torch\ntorch.cuda.is_initialized = lambda: True\n")
    # the fork server of Python 3.11 ignores the parent's sys.path: the fake is found through PYTHONPATH
    env = {"PYTHONPATH": f"{ROOT / 'src'}:{tmp_path}", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
           "INFERTUNE_LOG": str(tmp_path / "libraries.log"), "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), mode], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def test_a_worker_forked_from_a_server_that_initialised_cuda_refuses_to_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "infertune.tuning.worker_preload",
                        types.SimpleNamespace(CUDA_INITIALISED=True))
    assert "initialised CUDA" in worker._fork_unsafe()
    monkeypatch.setitem(sys.modules, "infertune.tuning.worker_preload",
                        types.SimpleNamespace(CUDA_INITIALISED=False))
    assert worker._fork_unsafe() is None


@pytest.mark.slow
def test_cuda_initialised_in_the_fork_server_makes_every_worker_spawn_with_one_line(tmp_path):
    got, err = _run(tmp_path, "fake")
    assert got["method"] == "spawn" and "initialised CUDA" in got["fell_back"]
    assert all(pid != got["parent"] for pid in got["pids"]) and len(set(got["pids"])) == 2
    said = [line for line in err.splitlines() if line.startswith("workers:")]
    assert len(said) == 1 and "spawn" in said[0], err[-2000:]


def _imports_initialise_cuda() -> bool:
    """Whether the fork server's imports initialise CUDA on this host (torchao does on a CUDA host)."""
    if shutil.which("nvidia-smi") is None and not Path("/dev/nvidiactl").exists():
        return False  # no NVIDIA driver: no import can initialise CUDA (and asking costs a torch import)
    p = subprocess.run([sys.executable, "-c", "import infertune.tuning.worker_preload as p; print(p.CUDA_INITIALISED)"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    return p.stdout.strip().endswith("True")


@pytest.mark.slow
def test_workers_fork_unless_the_imports_initialised_cuda_and_the_terminal_stays_quiet(tmp_path):
    got, err = _run(tmp_path, "real")
    if _imports_initialise_cuda():  # a CUDA host with torchao: the guard's real case
        assert got["method"] == "spawn" and "initialised CUDA" in got["fell_back"]
    else:
        assert got["method"] == "forkserver" and got["fell_back"] is None
    assert len(set(got["pids"])) == 2
    # the libraries' import chatter (torchao, torch's pytree) went to the log file, not to stderr
    assert "_pytree" not in err and "Failed to load" not in err, err[-2000:]
