"""Where no image builder runs: the Dockerfile's install steps (docker/install.sh, which both
Dockerfiles run) executed in a fresh venv from the checkout, then `infertune serve` from that venv on an artifact
and one request. The served process's RSS is compared with the memory limit deploy writes for the artifact.

Minutes of installing: run it with `make image` (it sets INFERTUNE_IMAGE_TEST=1; ARTIFACT=path, default
runs/latest/artifact from `make demo`). TORCH_INDEX: the Dockerfile's default is PyTorch's CPU index; on a box
without it, `pypi` lets pip's own configuration (an index, or find-links holding the +cpu wheel) provide torch."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.environ.get("INFERTUNE_IMAGE_TEST") != "1",
                                                   reason="installs a fresh venv (minutes): run `make image`")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def artifact():
    p = Path(os.environ.get("INFERTUNE_IMAGE_ARTIFACT") or ROOT / "runs" / "latest" / "artifact").resolve()
    if not (p / "manifest.json").is_file():
        pytest.skip(f"no artifact at {p}: run `make demo` first, or pass ARTIFACT=path")
    return p


@pytest.fixture
def server(tmp_path, artifact):
    from infertune.deploy.image import engine_extras

    m = json.loads((artifact / "manifest.json").read_text())
    extras = ",".join(engine_extras(m["candidate"]["backend"], "cpu"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    index = os.environ.get("TORCH_INDEX", "pypi")
    t0 = time.monotonic()
    subprocess.run(["sh", str(ROOT / "docker" / "install.sh"), str(ROOT), extras, index, str(venv / "bin" / "pip")],
                   check=True, env=env, timeout=1500)
    print(f"\ninstall.sh {extras} (TORCH_INDEX={index}): {time.monotonic() - t0:.0f} s")
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import infertune; print(infertune.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout.strip()
    assert where.startswith(str(venv)), where  # the venv's own copy, not the checkout's src/
    port = _free_port()
    proc = subprocess.Popen([str(venv / "bin" / "infertune"), "serve", str(artifact), "--port", str(port)],
                            env={**env, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(1)
        else:
            raise AssertionError("the server did not become ready in 300 s")
        yield port, proc, m
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_fresh_venv_from_the_install_script_serves_the_artifact(server, artifact, tmp_path):
    import numpy as np
    import psutil

    from infertune.deploy.config import DeployConfig
    from infertune.deploy.emit import deploy

    port, proc, m = server
    body = json.dumps({"model": m["model"], "input": ["a tuned model served from a fresh install", "hello"]}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        data = json.loads(r.read())["data"]
    vecs = np.array([d["embedding"] for d in data])
    assert vecs.shape[0] == 2 and vecs.shape[1] > 0
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-3)
    rss = sum(p.memory_info().rss for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)])
    w = deploy(DeployConfig(source=str(artifact), out=tmp_path / "deploy", targets=["k8s"])).workload
    print(f"served {m['candidate_id']}: RSS {rss / 2**20:.0f} MiB after one request; deploy's limit {w.memory_limit} "
          f"({'; '.join(w.sizing.explain)})")
    assert rss / 2**20 < w.sizing.memory_mib
