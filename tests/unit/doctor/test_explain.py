import re

import pytest

from infertune.doctor.explain import catalogue, explain

SIGS = catalogue()


def test_catalogue_has_36_sourced_entries():
    assert len(SIGS) == 36 and len({s.id for s in SIGS}) == 36
    for s in SIGS:
        assert s.sources and all(re.match(r"https://", u) for u in s.sources), s.id
        assert s.cause and s.fix


@pytest.mark.parametrize("sig", SIGS, ids=[s.id for s in SIGS])
def test_example_line_is_explained_by_its_entry(sig):
    log = f"INFO starting up\n{sig.example}\nINFO shutting down\n"
    res = explain(log)
    assert res.matches, sig.id
    top = res.matches[0]
    assert top.id == sig.id
    assert top.line == sig.example.strip()[:500] and top.line_no == 2
    assert top.source == sig.sources[0] and top.cause == sig.cause and top.fix == sig.fix


@pytest.mark.parametrize("log", [
    "Traceback (most recent call last):\n  File \"x.py\", line 3\nKeyError: 'foo'\n",
    "INFO: Uvicorn running on http://127.0.0.1:8000\nINFO: 200 OK\n",
    "",
])
def test_unrelated_logs_match_nothing(log):
    res = explain(log)
    assert res.matches == []
    assert "no known signature" in res.message


def test_more_specific_match_ranks_first_and_both_are_listed():
    log = ("[E:onnxruntime] Failed to load library libonnxruntime_providers_cuda.so with error: "
           "libcudart.so.12: cannot open shared object file: No such file or directory")
    ids = [m.id for m in explain(log).matches]
    assert ids[:2] == ["ort-cuda-provider-load", "libcudart-missing"]


def test_weak_pattern_alone_is_low_confidence_and_ranks_after_strong():
    log = "host:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\nTorch not compiled with CUDA enabled"
    ms = explain(log).matches
    assert [m.id for m in ms] == ["torch-cpu-only", "nccl-p2p-hang"]
    assert ms[1].confidence == "low"


def test_named_groups_are_reported():
    m = explain("ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8).").matches[0]
    assert m.details == {"heads": "28", "tp": "8"}
