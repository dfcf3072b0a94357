"""A missing extra stops a command with one line naming the install, exit 2, no traceback.

Simulated in-process: the modules an extra provides are blocked (`sys.modules[name] = None`, which makes
both `import name` and importlib.util.find_spec fail as for an uninstalled package) before the real entry
point runs. A bare `pip install .` venv was checked by hand once (docs/install-check.md); building one
here takes ~15 s: tests/integration/test_bare_install.py (marked slow) does it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LLAMA = str(Path(__file__).parents[1] / "configs" / "llama-3-8b.json")
TORCH = ["torch", "transformers", "sentence_transformers"]
BENCH = ["aiohttp", "httptools", "prometheus_client", "matplotlib"]
SERVE = ["fastapi", "uvicorn", "prometheus_client"]


def run_without(blocked: list[str], *args: str) -> subprocess.CompletedProcess:
    code = (f"import sys\nfor m in {blocked!r}: sys.modules[m] = None\n"
            f"sys.argv = ['infertune', *{list(args)!r}]\nfrom infertune.cli.main import main\nmain()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("blocked,args,extra", [
    (TORCH, ["tune", "--quick"], "report,torch"),
    (TORCH, ["inspect", "minilm"], "torch"),
    (SERVE, ["serve", "minilm"], "serve,torch"),
    (TORCH, ["serve", "minilm", "--ceiling"], "torch"),
    (["aiohttp"], ["bench", "http://127.0.0.1:9"], "bench"),
    (["aiohttp"], ["validate", "http://127.0.0.1:9"], "bench"),
    (["fastapi"], ["validate", "runs/x/artifact"], "bench,serve,torch"),
])
def test_missing_extra_is_one_line_naming_the_install(blocked, args, extra):
    r = run_without(blocked, *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    # from this checkout the install names its path (-e '/path/to/infertune[bench]'), else 'infertune[bench]'
    assert "; run: pip install " in lines[0] and f"[{extra}]'" in lines[0] and blocked[0] in lines[0], lines[0]


def test_plan_and_doctor_need_no_extra():
    every = sorted({*TORCH, *BENCH, *SERVE, "onnxruntime", "pynvml"})
    r = run_without(every, "plan", LLAMA, "--gpu", "L4")
    assert r.returncode == 0 and "fits:" in r.stdout, r.stderr
    r = run_without(every, "doctor", "--no-torch")
    assert r.returncode in (0, 1, 3) and "worst:" in r.stdout, r.stderr


def test_library_call_says_the_same(monkeypatch):
    import infertune
    from infertune import extras

    monkeypatch.setattr(extras, "installed", lambda m: m != "aiohttp")
    with pytest.raises(infertune.InfertuneError, match=r"pip install .*\[bench\]'"):
        infertune.bench(object())


def test_every_command_has_an_entry():
    from infertune._api import COMMANDS
    from infertune.cli.main import COMMANDS as CLI
    from infertune.extras import NEEDS

    assert set(COMMANDS) <= set(NEEDS) and set(CLI) <= set(NEEDS)


def test_the_install_names_where_infertune_came_from(tmp_path, monkeypatch):
    from infertune import extras

    root = Path(extras.__file__).resolve().parents[2]
    assert extras.pip_install(["bench"]) == f"pip install -e '{root}[bench]'"  # running from a checkout
