import json
import os
import subprocess
import sys

import pytest


@pytest.mark.gpu
@pytest.mark.slow
def test_tune_on_cuda_beats_fp32_eager(tmp_path):
    r = subprocess.run([sys.executable, "-m", "infertune.cli.main", "tune", "minilm", "--device", "cuda", "--quick",
                        "--out", str(tmp_path), "--json"], capture_output=True, text=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    ref = next(c for c in res["candidates"] if c["name"] == res["reference"])
    assert res["winner"]["items_per_s"] > ref["items_per_s"]
