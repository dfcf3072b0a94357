import math

from infertune.config import LMAccuracyBudget, TuneConfig
from infertune.engines.causal_lm.vllm_server import prefix_match
from infertune.results import Accuracy, CandidateResult, EnvFingerprint, Latency, TuneResult
from infertune.tasks.causal_lm.task import CausalLMTask
from infertune.tasks.causal_lm.verify import accuracy, greedy_agreement, within_budget
from infertune.tuning.decide import decide


def test_prefix_and_greedy_agreement():
    assert prefix_match([1, 2, 3], [1, 2, 4]) == 2
    assert prefix_match([1, 2], [1, 2]) == 2
    assert greedy_agreement([[1, 2, 3, 4], [5, 6]], [[1, 2, 0, 4], [5, 6]]) == (0.75, 0.5)


def test_accuracy_from_nll():
    ref = {"nll": 100 * math.log(20.0), "n": 100}
    cand = {"nll": 100 * math.log(20.5), "n": 100, "top1_agreement": 0.98, "kl_mean": 0.01}
    a = accuracy(ref, cand, [[1, 2]], [[1, 3]])
    assert math.isclose(a.ppl_ref, 20.0) and math.isclose(a.ppl, 20.5)
    assert math.isclose(a.ppl_delta_rel, 0.025)
    assert a.greedy_agreement == 0.5
    ok, why = within_budget(a, LMAccuracyBudget())
    assert not ok and "perplexity +2.50%" in why
    assert within_budget(a, LMAccuracyBudget(max_ppl_delta_rel=0.03))[0]
    ok, why = within_budget(a.model_copy(update={"ppl_delta_rel": 0.0, "top1_agreement": 0.9}), LMAccuracyBudget())
    assert not ok and "top-1" in why


def _cand(name, tps, ppl_delta, top1=0.99, ok=True):
    return CandidateResult(name=name, status="ok", tokens_per_s=tps,
                           tpot_ms=Latency(p5=1, p50=1000 / tps, p95=2, n=8) if tps else None,
                           accuracy=Accuracy(ppl_delta_rel=ppl_delta, top1_agreement=top1, kl_mean=0.0,
                                             greedy_agreement=1.0), meets_accuracy=ok)


def test_decide_picks_fastest_within_budget_and_keeps_rejected():
    cands = [_cand("hf-generate/fp32", 20, 0.0), _cand("static/bf16", 30, 0.001),
             _cand("static/fp32/torch.ao-dynamic", 60, 1.5, 0.5, ok=False), _cand("vllm/bf16", None, None)]
    cands[-1] = cands[-1].model_copy(update={"status": "skipped", "tokens_per_s": None})
    r = TuneResult(kind="causal-lm", model="m", config=TuneConfig().model_dump(mode="json"),
                   environment=EnvFingerprint(), candidates=cands, reference="hf-generate/fp32")
    task = CausalLMTask(TuneConfig(), None, None)
    r.baseline = cands[0]
    decide(task, r, 0.0, task.drift)
    assert r.winner.name == "static/bf16"
    assert r.winner.speedup_vs_baseline == 1.5
    rej = next(c for c in r.candidates if c.name.endswith("torch.ao-dynamic"))
    assert rej.status == "rejected" and rej.tokens_per_s == 60 and rej.accuracy.ppl_delta_rel == 1.5
    assert any("Faster but not chosen: static/fp32/torch.ao-dynamic" in x for x in r.decision)
    assert "1.50x the naive baseline" in " ".join(r.decision)
    assert r.pareto[0] == "static/fp32/torch.ao-dynamic"
