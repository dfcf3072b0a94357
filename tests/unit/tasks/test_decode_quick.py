"""`tune --lm-engine torch --quick` is a diagnosis in proportion: batch-1 decode only, the candidates that can win on
this CPU, no confirmation passes, and one sentence saying when no loop beats eager generate() and why (the roofline)."""

from types import SimpleNamespace

from infertune.config import TuneConfig
from infertune.hardware.capabilities import CPU, Capabilities
from infertune.results import CandidateResult, Latency, TuneResult
from infertune.tasks.causal_lm.candidates import options
from infertune.tasks.causal_lm.diagnosis import diagnose
from infertune.tasks.causal_lm.task import CausalLMTask

AVX2 = Capabilities(device="cpu", cpu=CPU(flags=frozenset({"avx2", "fma"})))
VNNI = Capabilities(device="cpu", cpu=CPU(flags=frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                                          "avx512_vnni"})))


def test_quick_on_a_cpu_without_vnni_does_not_try_emulated_int8():
    skip = {o.candidate.id: o.skip for o in options(AVX2, quick=True)}
    assert skip["static/fp32/torch.ao-dynamic"].startswith("not in --quick: this CPU has no VNNI")
    assert skip["static/fp32"] is None and skip["hf-generate/fp32"] is None
    assert {o.candidate.id: o.skip for o in options(AVX2)}["static/fp32/torch.ao-dynamic"] is None
    assert {o.candidate.id: o.skip for o in options(VNNI, quick=True)}["static/fp32/torch.ao-dynamic"] is None


def test_quick_measures_batch_one_decode_at_one_prompt_length():
    from infertune.tasks.causal_lm.plan import workload_plan

    class Tok:  # one id per character: enough for the plan's cuts
        eos_token_id = 0

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [1 + ord(c) % 50 for c in text]}

    spec = SimpleNamespace(max_length=2048)
    quick, _ = workload_plan(TuneConfig(model="smollm2", quick=True), spec, Tok())
    full, _ = workload_plan(TuneConfig(model="smollm2"), spec, Tok())
    asked, _ = workload_plan(TuneConfig(model="smollm2", quick=True, lm_batches=(1, 4)), spec, Tok())
    assert quick["batches"] == [1] and len(quick["ttft"]) == 1
    assert full["batches"] == [1, 8, 32] and len(full["ttft"]) == 3
    assert asked["batches"] == [1, 4] and len(asked["ttft"]) == 1  # batch sizes given: --quick measures them
    assert CausalLMTask.quick_confirm is False


def _r(name, backend, tps, roof=None, wb=538_000_000):
    return CandidateResult(name=name, status="ok", stage="full", tokens_per_s=tps, roofline_fraction=roof,
                           weight_bytes=wb, candidate={"backend": backend, "precision": "fp32"},
                           tpot_ms=Latency(p50=1000 / tps, n=7))


def _result(cands, winner):
    return TuneResult(kind="causal-lm", model="m", config={}, environment={}, workload=None, started="", out_dir="",
                      candidates=cands, winner=next(c for c in cands if c.name == winner),
                      lm={"bandwidth": {"gb_per_s": 14.6}})


def test_when_no_loop_beats_eager_one_sentence_says_so_with_the_roofline():
    eager, loop = _r("hf-generate/fp32", "hf-generate", 1.2, roof=0.045), _r("static/fp32", "static", 0.75)
    d = diagnose(_result([eager, loop], "hf-generate/fp32"))
    assert d["loop_beats_eager"] is False and d["roofline_ms_per_token"] == 36.85
    s = d["sentence"]
    assert s.startswith("No decode loop beat eager generate(): the fastest, static/fp32, measured 0.8 tokens/s "
                        "against 1.2 (38% slower).")
    assert "4% of the memory roofline (538 MB of weights per token / 14.6 GB/s measured = 36.8 ms a token" in s
    won = diagnose(_result([eager, _r("static/fp32", "static", 2.0)], "static/fp32"))
    assert won["loop_beats_eager"] and won["sentence"].startswith("A decode loop beat eager generate()")
    assert diagnose(_result([eager], "hf-generate/fp32")) is None  # nothing to compare
    late = CandidateResult(name="static/fp32", status="skipped", reason="time budget: 8 s needed to start, 0 s left",
                           candidate={"backend": "static", "precision": "fp32"})
    none = diagnose(_result([eager, late], "hf-generate/fp32"))
    assert none["loop_beats_eager"] is None and "static/fp32 was skipped (time budget: 8 s needed" in none["sentence"]
