"""Session fixtures shared by the integration suites."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tune_helpers import TUNE_BUDGET_S, run_cli, write_user_jsonl  # noqa: E402


@pytest.fixture(scope="session")
def user_jsonl(tmp_path_factory):
    return write_user_jsonl(tmp_path_factory.mktemp("wl") / "user.jsonl")


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory, user_jsonl):
    """One real `infertune tune minilm --quick` with a 75 s budget, as a user runs it, for the session:
    whatever this CPU can do decides the candidates (bf16 on AMX, int8/OpenVINO on AVX2)."""
    out = tmp_path_factory.mktemp("run")
    r = run_cli("tune", "minilm", "--workload", str(user_jsonl), "--quick", "--time-budget", str(TUNE_BUDGET_S), "--confirm-rounds", "3",
                "--out", str(out), "--json")
    return r, out


@pytest.fixture(scope="session")
def tuned_artifact(quick_run):
    r, out = quick_run
    art = out / "artifact"
    if r.returncode != 0 or not (art / "manifest.json").exists():
        pytest.fail(f"the quick tune wrote no artifact (exit {r.returncode}): {r.stderr[-2000:]}")
    return art
