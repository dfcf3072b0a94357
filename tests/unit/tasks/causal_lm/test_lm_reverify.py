"""The judging half of `infertune verify` for a causal LM served by vLLM, on recorded-looking answers (no server):
the greedy check against the budget and its first mismatch, the batch check (the same prompts alone and together,
with `_complete` standing in for the server), and the speed ratio only where tune measured the same way."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from infertune.tasks.causal_lm import reverify as rv

SAMPLES = [{"prompt": f"p{i}", "prompt_ids": [i, i + 1], "prompt_tokens": 2 + i, "tokens": [7, 8, 9, 10],
            "text": "abcd"} for i in range(4)]


def _greedy(matches):
    return {"greedy_agreement": sum(m / 4 for m in matches) / len(matches),
            "exact": sum(m == 4 for m in matches) / len(matches), "n": len(matches),
            "samples": [{"prompt_tokens": 2 + i, "expected": "abcd", "served": "abcd" if m == 4 else "abzz",
                         "match": m, "of": 4} for i, m in enumerate(matches)],
            "served_tokens": [[7, 8, 9, 10] if m == 4 else [7, 8, 0, 0] for m in matches]}


def test_greedy_is_judged_against_the_top1_budget_and_names_the_first_mismatch():
    ok = rv.judge_greedy(_greedy([4, 4, 4, 4]), 0.97)
    assert ok.ok and ok.exact == 1.0 and ok.first_mismatch is None
    bad = rv.judge_greedy(_greedy([4, 2, 4, 4]), 0.97)
    assert not bad.ok and bad.agreement == 0.875 and bad.first_mismatch["after_tokens"] == 2
    assert "3/4 recorded continuations reproduced exactly" in rv.greedy_line(bad)
    assert "after 2 tokens of a 3-token prompt" in rv.greedy_line(bad)


def test_an_answer_that_moves_when_batched_fails_the_batch_check(monkeypatch):
    m = {"greedy": {"samples": SAMPLES}}
    seq = _greedy([4, 4, 4, 4])
    monkeypatch.setattr(rv, "_complete", lambda url, s: [7, 8, 9, 10])
    same = rv.batch_check("http://x", m, seq, 4, 0.97)
    assert same.ok and same.agreement == 1.0 and not same.moved
    monkeypatch.setattr(rv, "_complete", lambda url, s: [7, 8, 9, 10] if s["prompt"] != "p2" else [7, 1, 1, 1])
    moved = rv.batch_check("http://x", m, seq, 4, 0.97)
    assert not moved.ok and moved.agreement == 0.8125
    assert moved.moved == [{"prompt_tokens": 4, "after_tokens": 1, "of": 4}]
    assert "4-token prompt after 1/4" in rv.batch_line(moved)


@pytest.mark.parametrize("tuned, workload, want_ratio", [
    ({"requests_per_s": 2.0, "concurrency": 4, "slo": "no SLO: requests/s at concurrency 4", "goodput_rps": None},
     None, 0.75),  # a closed-loop point, as here: judged
    ({"requests_per_s": 2.0, "concurrency": 4, "slo": "p99_ttft_ms<=800", "goodput_rps": 1.5}, None, None),  # searched
    ({"requests_per_s": 2.0, "concurrency": 4, "goodput_rps": None}, "load.jsonl", None),  # the user's load
])
def test_speed_is_a_ratio_only_against_a_figure_measured_the_same_way(monkeypatch, tmp_path, tuned, workload,
                                                                      want_ratio):
    import infertune.tasks.causal_lm.served_measure as served

    (tmp_path / "load.jsonl").write_text('{"prompt": "x", "max_tokens": 4}\n')
    monkeypatch.setattr(served, "load", lambda url, path, **kw: {"requests_per_s": 1.5, "n": 30})
    cfg = SimpleNamespace(workload=workload and tmp_path / workload, lm_duration_s=1.0, max_slowdown=0.1)
    s = rv.measure_speed("http://x", Path(tmp_path), {"tune": tuned}, cfg)
    assert s.ratio == want_ratio and s.ok == (want_ratio is None)
    assert ("ratio 0.750x, limit 0.90x" in s.note) if want_ratio else ("no ratio" in s.note)


def test_texts_that_differ_only_in_skipped_special_tokens_are_no_mismatch():
    """The served text skips special tokens the recorded one shows; the tokens decide."""
    g = _greedy([4, 4])
    g["samples"][0]["expected"], g["samples"][0]["served"] = "<|im_end|>\nassistant", "\nassistant"
    assert rv.judge_greedy(g, 0.97).first_mismatch is None


def test_an_artifact_without_a_fingerprint_says_so_instead_of_listing_every_library():
    now = {"libraries": {"torch": "2.13.0"}, "cpu_flags": ["avx2"]}
    assert rv._diff(None, now) == rv._diff({}, now) and "no environment fingerprint" in rv._diff(None, now)[0]
    assert rv._diff({"libraries": {"torch": "2.12.0"}, "cpu_flags": ["avx2"]}, now) == [
        "torch: 2.12.0 (artifact) -> 2.13.0 (here)"]
