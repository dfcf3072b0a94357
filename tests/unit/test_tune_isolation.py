"""A candidate that raises, hangs, crashes its process or is unavailable is recorded, and the run goes on.
Uses the fake backend for the misbehaving candidates and the real MiniLM for the fp32 reference."""

import json

import pytest

from infertune.config import Batching, Candidate, TuneConfig
from infertune.tune import tune

B = Batching(kind="tokens", size=512)


def fake(**opts):
    return Candidate(backend="fake", precision="fp32", options=tuple(sorted(opts.items())), batching=B)


@pytest.mark.slow
def test_misbehaving_candidates_are_recorded_and_run_continues(tmp_path):
    cands = [
        fake(us_per_token="1"),
        fake(fail="prepare"),
        fake(fail="crash"),
        fake(fail="hang", timeout_s="4"),
        fake(unavailable="needs a flux capacitor"),
        fake(fail="forward", tag="f"),
    ]
    cfg = TuneConfig(quick=True, rounds=1, max_eval_items=24, out=tmp_path, write_artifact=False,
                     sensitivity=False, candidate_timeout_s=120)
    res = tune(cfg, quiet=True, candidates=cands)
    by = {c.name: c for c in res.candidates}
    assert by[cands[1].id].status == "failed" and "asked to fail in prepare" in by[cands[1].id].reason
    assert by[cands[2].id].status == "failed" and "died" in by[cands[2].id].reason
    assert by[cands[3].id].status == "failed" and "timed out" in by[cands[3].id].reason
    assert by[cands[4].id].status == "skipped" and by[cands[4].id].reason == "needs a flux capacitor"
    assert by[cands[5].id].status == "failed" and "forward" in by[cands[5].id].reason
    # the well-behaved fake was measured, and verified (its vectors are not the model's: rejected)
    ok = by[cands[0].id]
    assert ok.items_per_s and ok.items_per_s > 0 and ok.status == "rejected"
    # the real reference and baseline ran too, and everything is on disk
    assert by["torch-eager/fp32/tokens-1024"].accuracy.cosine_min > 0.99999
    saved = json.loads((tmp_path / "results.json").read_text())
    assert {c["name"] for c in saved["candidates"]} == set(by)
