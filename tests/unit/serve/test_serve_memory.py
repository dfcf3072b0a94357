"""serve/memory.py sets its defaults only where the environment has not chosen, in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

CODE = ("import json, os; from infertune.serve.memory import bound_cpu_memory; d = bound_cpu_memory(); "
        "print(json.dumps([d, os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY')]))")


def _run(**env: str) -> list:
    e = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "MALLOC_MMAP_THRESHOLD_")}
    out = subprocess.run([sys.executable, "-c", CODE], env={**e, **env}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_defaults_applied_when_unset():
    done, cap = _run()
    assert cap == "256" and any("primitive cache" in d for d in done)
    if sys.platform.startswith("linux"):
        assert any("mmap threshold" in d for d in done)


def test_user_environment_wins():
    done, cap = _run(ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024", MALLOC_MMAP_THRESHOLD_="65536")
    assert cap == "1024" and done == []


def test_length_padding_is_masked_and_a_multiple_of_8():
    from infertune.batching import PAD_MULTIPLE, pad_length

    batch = {"input_ids": np.array([[5, 6, 7], [5, 0, 0]]), "attention_mask": np.array([[1, 1, 1], [1, 0, 0]])}
    out = pad_length(batch, PAD_MULTIPLE, pad_id=0)
    assert out["input_ids"].shape == (2, PAD_MULTIPLE) and out["attention_mask"][:, 3:].sum() == 0
    assert (out["input_ids"][:, :3] == batch["input_ids"]).all()
