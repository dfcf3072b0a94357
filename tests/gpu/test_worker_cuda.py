"""On a CUDA host with the install a user gets (torchao included, which initialises CUDA when transformers
imports it): a tune worker can use the GPU, however the fork server's imports went."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import json
from infertune.tuning import worker
free, total = worker.run_isolated("torch.cuda:mem_get_info", {}, 300)  # needs a CUDA context in the worker
print(json.dumps({"free": free, "total": total, **worker.start_method()}))
"""


@pytest.mark.gpu
def test_a_worker_uses_the_gpu_whatever_the_fork_servers_imports_did():
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert 0 < got["free"] <= got["total"]
    print(got)  # which start method, and why (the GPU run's log shows it)
