"""The one decision rule (infertune.tuning.decide) as the embedding task applies it: fastest within SLO
and accuracy, ties to the simpler engine, and a useful answer when nothing is eligible."""

from infertune.config import SLO, AccuracyBudget, TuneConfig
from infertune.results import Accuracy, CandidateResult, EnvFingerprint, Latency, TuneResult
from infertune.tasks.embedding.task import EmbeddingTask
from infertune.tuning.decide import decide as _decide
from infertune.tuning.decide import pareto_front


def decide(res, cfg):
    task = EmbeddingTask(cfg, None, None)
    _decide(task, res, cfg.tie_margin, task.drift)


def _r(name, ips, p99, cos, meets_acc=True):
    return CandidateResult(name=name, status="ok", items_per_s=ips, latency_ms=Latency(p50=p99 / 2, p99=p99, n=10),
                           accuracy=Accuracy(cosine_mean=cos, cosine_min=cos - 0.001), meets_accuracy=meets_acc,
                           reason="" if meets_acc else "mean cosine low")


def _result(cands):
    return TuneResult(model="m", config={}, environment=EnvFingerprint(), candidates=cands, baseline=cands[0])


def test_fastest_within_slo_and_budget_wins_and_others_are_explained():
    cands = [_r("st-naive/fp32/batch-32", 50, 900, 1.0), _r("a", 300, 150, 0.9999),
             _r("b", 250, 80, 0.9999), _r("c", 400, 50, 0.97, meets_acc=False), _r("d", 200, 60, 1.0)]
    res = _result(cands)
    decide(res, TuneConfig(slo=SLO(p99_ms=100), accuracy=AccuracyBudget()))
    assert res.winner.name == "b"
    st = {c.name: c.status for c in res.candidates}
    assert st["a"] == "rejected" and "P99" in res.candidates[1].reason
    assert st["c"] == "rejected"
    assert res.candidates[2].speedup_vs_baseline == 5.0
    assert any("5.00x" in line for line in res.decision)


def test_no_eligible_candidate_gives_no_winner_but_says_what_is_achievable():
    res = _result([_r("st-naive/fp32/batch-32", 50, 900, 1.0), _r("a", 300, 500, 0.99, meets_acc=False),
                   _r("b", 120, 180, 0.9999), _r("c", 90, 140, 0.9999)])
    decide(res, TuneConfig(slo=SLO(p99_ms=100)))
    assert res.winner is None and "No candidate" in res.decision[0]
    ach = res.achievable
    assert ach["lowest_p99"] == {"name": "c", "p99_ms": 140.0}
    fast = ach["fastest_within_accuracy"]
    # the flag admits b: its P99 (180 ms) rounded up to a limit it meets
    assert fast["name"] == "b" and fast["flags"].startswith("--slo-p99-ms ")
    assert 180 <= float(fast["flags"].split()[1]) <= 200
    text = " ".join(res.decision)
    assert "--slo-p99-ms" in text and "Lowest P99 measured: c" in text


def test_probe_only_candidates_are_never_winners():
    fast = _r("probed", 900, 10, 1.0)
    fast.stage = "probe"
    res = _result([_r("st-naive/fp32/batch-32", 50, 900, 1.0), fast, _r("full", 200, 50, 1.0)])
    decide(res, TuneConfig(slo=SLO(p99_ms=100)))
    assert res.winner.name == "full"


def test_pareto_front():
    cands = [_r("slow-exact", 10, 1, 1.0), _r("fast-lossy", 100, 1, 0.9), _r("dominated", 50, 1, 0.89)]
    task = EmbeddingTask(TuneConfig(), None, None)
    assert pareto_front(task, cands, task.drift) == ["fast-lossy", "slow-exact"]


def _b(name, backend, ips):
    r = _r(name, ips, 50, 0.9999)
    r.candidate = {"backend": backend}
    return r


def test_simpler_engine_within_tie_margin_wins_and_the_gap_is_stated():
    cands = [_r("st-naive/fp32/batch-32", 50, 900, 1.0), _b("compiled", "torch-compile", 262.0),
             _b("eager", "torch-eager", 255.0), _b("ort", "onnxruntime", 258.0)]
    res = _result(cands)
    decide(res, TuneConfig(slo=SLO(p99_ms=100), tie_margin=0.05))
    assert res.winner.name == "eager"
    assert any("compiled" in line and "tie margin" in line for line in res.decision)


def test_a_clearly_faster_complex_engine_still_wins():
    cands = [_r("st-naive/fp32/batch-32", 50, 900, 1.0), _b("compiled", "torch-compile", 300.0),
             _b("eager", "torch-eager", 255.0)]
    res = _result(cands)
    decide(res, TuneConfig(slo=SLO(p99_ms=100), tie_margin=0.05))
    assert res.winner.name == "compiled"
    assert not any("tie margin" in line for line in res.decision)
    res = _result([_r("st-naive/fp32/batch-32", 50, 900, 1.0), _b("compiled", "torch-compile", 262.0),
                   _b("eager", "torch-eager", 255.0)])
    decide(res, TuneConfig(slo=SLO(p99_ms=100), tie_margin=0.0))
    assert res.winner.name == "compiled"


def test_within_the_margin_the_same_engine_with_the_lower_p99_wins():
    big = _b("eager-2048", "torch-eager", 311.6)
    big.latency_ms = Latency(p50=70, p99=81.0, n=10)
    small = _b("eager-1024", "torch-eager", 298.9)
    small.latency_ms = Latency(p50=40, p99=55.0, n=10)
    res = _result([_r("st-naive/fp32/batch-32", 50, 900, 1.0), big, small])
    decide(res, TuneConfig(slo=SLO(p99_ms=100), tie_margin=0.10))
    assert res.winner.name == "eager-1024"
    assert any("lower latency" in line for line in res.decision)


def test_inside_the_tie_margin_the_unquantized_candidate_wins():
    """On an AMX Xeon: openvino int8 PTQ 322.8 items/s (cos 0.99754) vs openvino bf16 311.3 (0.99999): tied
    within 10%, so bf16 wins (no calibration, answers kept); outside the margin int8 still wins."""
    def cand(name, ips, p99, cos, quant):
        r = _r(name, ips, p99, cos)
        r.candidate = {"backend": "openvino", "quant": quant}
        return r

    base = _r("st-naive/fp32/batch-32", 73, 900, 1.0)
    res = _result([base, cand("ov/int8", 322.8, 84.8, 0.99754, "nncf-ptq"),
                   cand("ov/bf16", 311.3, 90.3, 0.99999, None)])
    decide(res, TuneConfig(slo=SLO(p99_ms=100)))
    assert res.winner.name == "ov/bf16"
    assert any("unquantized" in line and "0.99999 vs 0.99754" in line for line in res.decision), res.decision
    res = _result([base, cand("ov/int8", 400.0, 84.8, 0.99754, "nncf-ptq"),
                   cand("ov/bf16", 311.3, 90.3, 0.99999, None)])
    decide(res, TuneConfig(slo=SLO(p99_ms=100)))
    assert res.winner.name == "ov/int8"
