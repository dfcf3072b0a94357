"""`serve --device cuda` goes through the same batch core as serve on a CPU: in one process (--frontends 1, the core
in a thread) and in the processes topology (an engine process per GPU, a GPU host's default), /ready names the
batch core class, and both answer with the same vectors. Run on an H200 GPU host with:
`bash scripts/gpu/serve_cuda_test.sh` (the GPU image has no embedded-model package: INFERTUNE_TEST_MINILM names
the restored MiniLM directory)."""

import os
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "serve"))


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_serve_runs_the_one_batch_core_in_both_topologies():
    from serve_helpers import bench, cos_rows, embed

    texts = ["the GPU runs the same batch core", "as the CPU does", "in either topology"]
    model = os.environ.get("INFERTUNE_TEST_MINILM", "minilm")
    seen = {}
    for flags in (("--frontends", "1"), ("--frontends", "2")):
        srv = bench.ours(model, "--device", "cuda", *flags, "--drain-s", "0").wait_ready(600)
        try:
            worker = httpx.get(srv.url + "/ready", timeout=10).json()["worker"]
            served = httpx.get(srv.url + "/v1/models", timeout=10).json()["data"][0]["id"]
            r = embed(srv.url, texts, served)
            assert r.status_code == 200, r.text
            seen[worker["mode"]] = (worker["batch_core"], np.array([d["embedding"] for d in r.json()["data"]]))
        finally:
            srv.stop()
    assert set(seen) == {"thread", "processes"}
    assert seen["thread"][0] == seen["processes"][0] == "infertune.serve.batch_core.BatchCore"
    assert cos_rows(seen["thread"][1], seen["processes"][1]).min() >= 0.999
