"""tune rejects an engine whose answers depend on what each text was batched with: a real encoder (torch eager fp32;
a tiny BERT, tiny_bert, as the check is about the engine, not the model) with noise seeded by the whole batch, close
enough to the reference to pass the cosine budget, so only the batch-invariance check can catch it. The fp32
reference in the same run passes it."""

import json

import pytest

from infertune.config import SLO, Batching, Candidate, TuneConfig
from infertune.tasks.embedding import invariance as inv
from infertune.tune import tune

pytestmark = pytest.mark.slow


def test_tune_rejects_batch_dependent_answers_naming_the_deviation(tmp_path, tiny_bert):
    noisy = Candidate(backend="fake", precision="fp32", options=(("base", "torch-eager"), ("batch_noise", "0.05")),
                      batching=Batching(kind="tokens", size=2048))
    cfg = TuneConfig(model=tiny_bert, quick=True, rounds=1, confirm_rounds=0, max_eval_items=32, out=tmp_path,
                     write_artifact=False, sensitivity=False, slo=SLO(p99_ms=10_000), time_budget_s=240,
                     drop_below=0)  # the noise costs speed; a probe drop would skip the check this test is about
    res = tune(cfg, quiet=True, candidates=[noisy])
    by = {c.name: c for c in res.candidates}
    bad = by[noisy.id]
    print(f"\n{bad.name}: {bad.status}: {bad.reason}")
    b = bad.accuracy.batch_invariance
    assert bad.status == "rejected" and bad.meets_accuracy is False
    assert bad.accuracy.cosine_mean > cfg.accuracy.min_cosine_mean  # the reference comparison alone would pass it
    assert b is not None and b.worst_deviation > 1e-3 and b.moved
    assert "answers depend on the batch" in bad.reason and f"{b.worst_deviation:.2e}" in bad.reason
    assert f"{b.worst_text_tokens} tokens" in bad.reason
    ref = by[res.reference].accuracy.batch_invariance
    assert ref is not None and ref.worst_deviation < 1e-5 and ref.moved == []
    saved = json.loads((tmp_path / "results.json").read_text())
    rec = {c["name"]: c for c in saved["candidates"]}[noisy.id]["accuracy"]["batch_invariance"]
    assert rec["n_texts"] == inv.SAMPLE and rec["moved"] == b.moved and rec["tolerance"] == pytest.approx(5e-4)
    assert "batch 1-cos" in (tmp_path / "report.html").read_text()
