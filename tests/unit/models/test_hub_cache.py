"""A Hub id resolves from the local Hugging Face cache, offline; without it, one line says what to download
and where. `plan BAAI/bge-small-en-v1.5` is run through the real CLI entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infertune.errors import InfertuneError
from infertune.models.resolve import resolve_model

REPO = "BAAI/bge-small-en-v1.5"


def _cache(root: Path) -> Path:
    """The hub cache layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<commit>/...}; the
    files are MiniLM's (a BERT encoder with the same shape of files as bge-small)."""
    src = resolve_model("minilm").path
    repo = root / "hub" / ("models--" + REPO.replace("/", "--"))
    snap = repo / "snapshots" / "5c38ec7c405ec4b44b94cc5a9bb96e735b38267a"
    shutil.copytree(src, snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("5c38ec7c405ec4b44b94cc5a9bb96e735b38267a")
    return root / "hub"


def _plan(env_cache: Path | None, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(Path(__file__).parents[3] / "src")}
    if env_cache is not None:
        env["HF_HUB_CACHE"] = str(env_cache)
    code = (f"import sys; sys.argv = ['infertune', 'plan', {REPO!r}, '--gpu', 'L4']; "
            "from infertune.cli.main import main; main()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_hub_id_resolves_from_the_local_cache(tmp_path, monkeypatch):
    cache = _cache(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    ref = resolve_model(REPO)
    assert ref.name == REPO and ref.format == "sentence-transformers" and ref.path.parent.name == "snapshots"
    r = _plan(cache, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{REPO} (encoder embedder") and "fits on 1 GPU: yes" in r.stdout


def test_hub_id_not_cached_is_one_line_saying_what_to_download_and_where(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(InfertuneError, match=r"hf download BAAI/bge-small-en-v1.5"):
        resolve_model(REPO)
    r = _plan(tmp_path / "empty", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "not in the local cache" in lines[0] and str(tmp_path / "empty") in lines[0]


def test_a_pt_file_given_to_plan_is_one_line_not_a_json_error(tmp_path):
    pt = tmp_path / "model.pt"
    pt.write_bytes(b"PK\x03\x04 not json")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[3] / "src"), "HOME": str(tmp_path)}
    code = (f"import sys; sys.argv = ['infertune', 'plan', {str(pt)!r}, '--gpu', 'H100']; "
            "from infertune.cli.main import main; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "Expecting value" not in r.stderr and "Traceback" not in r.stderr
    assert "config.json" in r.stderr and "infertune export" in r.stderr
