"""`pip install .` with no extras, in a fresh venv: each command either works or says in one
line which install to run (exit 2); no traceback. ~15 s with pip's cache warm; skipped when pip cannot
reach an index (the dependencies are pydantic, typer, rich, numpy, psutil, httpx)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv's own install, not this checkout
LLAMA = str(ROOT / "tests" / "unit" / "configs" / "llama-3-8b.json")

WORKS = [["--version"], ["--help"], ["plan", LLAMA, "--gpu", "H100", "--context", "8192"], ["doctor", "--no-torch"]]
NEEDS_EXTRA = [(["tune", "--quick"], "torch"), (["serve"], "serve"), (["inspect", "minilm"], "torch"),
               (["bench", "http://127.0.0.1:9"], "bench"), (["validate", "http://127.0.0.1:9"], "bench")]


def _has_pip() -> bool:
    """pip 22.3 or later here (its --python installs into another interpreter's environment)."""
    try:
        from pip import __version__
    except ImportError:
        return False
    return tuple(int(x) for x in __version__.split(".")[:2] if x.isdigit()) >= (22, 3)


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    venv = tmp_path_factory.mktemp("bare") / "venv"
    # this interpreter's pip installs into the new venv (pip --python): no pip of its own to bootstrap (~5 s)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")] if _has_pip() else None
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if pip else []), str(venv)], check=True,
                   timeout=60)
    r = subprocess.run([*(pip or [str(venv / "bin" / "pip")]), "install", "-q", "--disable-pip-version-check",
                        str(ROOT)], capture_output=True, text=True, timeout=300, env=ENV)
    if r.returncode != 0:
        if any(s in r.stderr for s in ("No matching distribution", "Could not find a version", "Network",
                                       "Temporary failure", "Max retries")):
            pytest.skip(f"pip could not reach a package index: {r.stderr.strip().splitlines()[-1]}")
        raise AssertionError(r.stderr[-3000:])
    return venv / "bin" / "infertune"


@pytest.mark.slow
def test_core_install_has_no_model_stack(bare):
    py = bare.parent / "python"
    r = subprocess.run([str(py), "-c", "import importlib.util as u; print([m for m in ('torch', 'aiohttp', "
                        "'fastapi', 'transformers') if u.find_spec(m)])"], capture_output=True, text=True, env=ENV)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", WORKS, ids=lambda a: " ".join(a[:1]))
def test_command_works(bare, args):
    r = subprocess.run([str(bare), *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV)
    assert r.returncode in (0, 1, 3) if args[0] == "doctor" else r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and r.stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize("args,extra", NEEDS_EXTRA, ids=lambda a: " ".join(a[:1]) if isinstance(a, list) else a)
def test_command_names_its_install(bare, args, extra):
    r = subprocess.run([str(bare), *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "; run: pip install " in lines[0] and extra in lines[0].rsplit("[", 1)[-1], lines[0]


@pytest.mark.slow
def test_it_runs_the_installed_copy(bare):
    py = bare.parent / "python"
    r = subprocess.run([str(py), "-c", "import infertune; print(infertune.__file__)"], capture_output=True, text=True,
                       env=ENV, cwd=bare.parent)
    assert "site-packages" in r.stdout, r.stdout + r.stderr
