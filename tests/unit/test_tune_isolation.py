"""A candidate that raises, hangs, crashes its process or is unavailable is recorded, and the run goes on;
a pathological one is dropped after its probe and costs seconds; with nothing eligible the run still
writes results and says what is achievable. Fake backend for the misbehaving candidates, a tiny BERT encoder
(tiny_bert: 2 layers, width 32) for the fp32 reference and the naive baseline: the isolation and the search's
stages are the point, not a real model's speed or answers."""

import json

import pytest

from infertune.config import SLO, Batching, Candidate, TuneConfig
from infertune.tasks.embedding.candidates import reference
from infertune.tune import tune

B = Batching(kind="tokens", size=512)
BUDGET = 240  # room for every fake on a slow box; the run ends when its work is done, not at the budget


def fake(**opts):
    return Candidate(backend="fake", precision="fp32", options=tuple(sorted(opts.items())), batching=B)


@pytest.mark.slow
def test_misbehaving_candidates_are_recorded_and_run_continues(tmp_path, tiny_bert):
    cands = [
        fake(us_per_token="1"),
        fake(fail="prepare"),
        fake(fail="crash"),
        fake(fail="hang", timeout_s="4"),
        fake(unavailable="needs a flux capacitor"),
        fake(fail="forward", tag="f"),
        # ~1 s per item, sleeping: far below the fp32 reference even when the reference shares its cores
        # with a neighbour (a sleep is not slowed by one); small batches keep each one ~1.3 s
        fake(us_per_token="20000").model_copy(update={"batching": Batching(kind="tokens", size=64)}),
    ]
    # a 1 µs SLO: no batch meets it on any CPU, however small the model
    cfg = TuneConfig(model=tiny_bert, quick=True, rounds=1, confirm_rounds=1, max_eval_items=48, out=tmp_path,
                     write_artifact=False, sensitivity=False, candidate_timeout_s=120, slo=SLO(p99_ms=0.001),
                     time_budget_s=BUDGET)
    res = tune(cfg, quiet=True, candidates=cands)
    by = {c.name: c for c in res.candidates}
    print("\n" + "\n".join(f"{c.name}: {c.status} {c.stage} {c.time_s} s: {c.reason}" for c in res.candidates))
    assert by[cands[1].id].status == "failed" and "asked to fail in prepare" in by[cands[1].id].reason
    assert by[cands[2].id].status == "failed" and "died" in by[cands[2].id].reason
    assert by[cands[3].id].status == "failed" and "timed out" in by[cands[3].id].reason
    assert by[cands[4].id].status == "skipped" and by[cands[4].id].reason == "needs a flux capacitor"
    assert by[cands[5].id].status == "failed" and "forward" in by[cands[5].id].reason
    # the well-behaved fake was probed and verified (its vectors are not the model's: rejected)
    ok = by[cands[0].id]
    assert ok.status == "rejected" and "cosine" in ok.reason and ok.probe["speed"] > 0
    # the pathological one: dropped after one probe (far below the line: no re-probe), within seconds
    slow = by[cands[6].id]
    assert slow.status == "rejected" and slow.stage == "probe" and "dropped after the probe" in slow.reason
    # seconds, not a measurement: one timed pass over the 48 eval items alone would take >= 48 s (1 s per item,
    # sleeping). Its process start and probe read 10.4 s beside two CPU hogs, so the bound is 30 s, not 15
    assert slow.time_s <= 30, slow.time_s
    print(f"\npathological candidate: probe {slow.probe['speed']:.1f} items/s, cost {slow.time_s:.1f} s")
    # the real reference and baseline ran too
    ref = by[res.reference]
    assert res.reference.startswith(reference("cpu").engine_id)
    assert ref.accuracy.cosine_min > 0.99999 and ref.stage in ("full", "confirm")
    # a 1 µs SLO: no winner, but what is achievable and the flag that admits it
    assert res.winner is None
    fast = res.achievable["fastest_within_accuracy"]
    assert fast["flags"].startswith("--slo-p99-ms") and float(fast["flags"].split()[1]) >= fast["p99_ms"]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert {c["name"] for c in saved["candidates"]} == set(by)
    s = saved["search"]
    assert s["candidates"][cands[6].id]["stage"] == "probe" and s["dropped"][0]["candidate"] == cands[6].id
    assert [x["stage"] for x in s["stages"]] == ["reference", "probe", "refine", "full", "confirm"]
    assert s["stages"][0]["ended_s"] <= s["stages"][1]["started_s"]  # the reference's verification, then the probes
    assert {"prepare", "verify", "probe"} <= set(s["cost_s"]) and s["candidates"][res.reference]["cost_s"]["verify"] > 0
    assert saved["wall_s"] <= 1.1 * BUDGET


@pytest.mark.slow
def test_an_int8_candidate_whose_engine_ran_fp32_gemms_is_rejected_by_tune(tmp_path, tiny_bert):
    """Through the loop: the worker profiles one batch after preparing, results.json keeps the kernel mix, and
    verification rejects the candidate named int8 that ran fp32 GEMMs, naming the count."""
    lying = Candidate(backend="fake", precision="int8", options=(("gemms", "fp32:36"),), batching=B)
    cfg = TuneConfig(model=tiny_bert, quick=True, rounds=1, confirm_rounds=1, max_eval_items=48, out=tmp_path,
                     write_artifact=False, sensitivity=False, candidate_timeout_s=120, time_budget_s=BUDGET)
    res = tune(cfg, quiet=True, candidates=[lying])
    got = next(c for c in res.candidates if c.name == lying.id)
    assert got.status == "rejected" and got.reason.startswith("int8 requested, 0 of 36 GEMMs ran int8"), got.reason
    saved = {c["name"]: c for c in json.loads((tmp_path / "results.json").read_text())["candidates"]}
    assert saved[lying.id]["executed"]["kernels"]["gemms"] == {"fp32": 36}
    ref = saved[res.reference]["executed"]["kernels"]  # the real fp32 reference: its Linear layers, profiled
    assert ref["source"] == "torch.profiler" and ref["gemms"] == {"fp32": ref["total"]} and ref["total"] > 0
    assert 'id="kernels"' in (tmp_path / "report.html").read_text()
