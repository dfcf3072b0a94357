"""Fit before start for `tune --lm-engine torch` on a GPU: what cannot fit is skipped with the figures, quantized
loads are streamed when the 16-bit model cannot fit, and a 16-bit reference too big for the card runs on the CPU.
Faked hosts, config-only models."""

from pathlib import Path
from types import SimpleNamespace

from infertune.config import TuneConfig
from infertune.hardware.capabilities import CPU, GPU, Capabilities
from infertune.results import TuneResult
from infertune.tasks.causal_lm.candidates import options
from infertune.tasks.causal_lm.fit_torch import screen
from infertune.tasks.causal_lm.task import CausalLMTask

CONFIGS = Path(__file__).parents[1] / "configs"
CPU16 = CPU(flags=frozenset({"avx2", "fma"}), cores=16, mhz=3000.0)
RTX4060 = Capabilities(device="cuda", cpu=CPU16, gpus=(GPU(name="NVIDIA GeForce RTX 4060 Laptop GPU",
                                                           capability=(8, 9), memory_gb=8.0),))
H100 = Capabilities(device="cuda", cpu=CPU16, gpus=(GPU(name="NVIDIA H100 80GB HBM3", capability=(9, 0),
                                                        memory_gb=79.2),))
GIB = 2**30


def task(config: str, quick: bool = True) -> CausalLMTask:
    t = CausalLMTask.__new__(CausalLMTask)
    t.cfg, t.console = TuneConfig(model="m", quick=quick), SimpleNamespace(print=lambda *a, **k: None)
    t.spec = SimpleNamespace(path=str(CONFIGS / config), to_dict=lambda: {})
    t.plan = {"batches": [1], "max_len": 160, "ttft": {"p50:300": list(range(300))}}
    t.ref_cand, t.stream = None, set()
    t.result = TuneResult(kind="causal-lm", model="m", config={}, environment={}, workload=None, started="",
                          out_dir="", reference="hf-generate/bf16", lm={})
    return t


def test_llama3_8b_on_an_8gb_ada_card_keeps_int4_and_moves_the_reference_to_the_cpu():
    t = task("llama-3-8b.json", quick=False)
    opts = screen(t, options(RTX4060), RTX4060, free_gib=7.5, mem_available=64 * GIB)
    skipped = {o.candidate.id: o.skip for o in opts if o.skip}
    tried = [o.candidate.id for o in opts if not o.skip]
    # 15.0 GiB of bf16 weights, 8.0 of int8: only the int4 weights (5.3 GiB with a 16-bit lm_head) fit 7.5 free
    assert tried == ["hf-generate/fp32@cpu", "cuda-graph/bf16/torchao-int4", "vllm/bf16"], tried
    bf16 = skipped["cuda-graph/bf16"]
    assert bf16.startswith("needs 15.5 GiB (bf16 weights 15.0") and "7.5 of 8.0 GiB free now" in bf16
    assert "is free for this engine" in skipped["cuda-graph/bf16/torchao-int8-wo"]
    # the int4 candidate's 16-bit model would not fit on the way to quantizing it: loaded layer by layer
    assert t.stream == {"cuda-graph/bf16/torchao-int4"}
    # the reference: fp32 on the CPU (30 GiB of weights in 64 GiB of RAM), named in results.json
    assert t.ref_cand.id == t.result.reference == t.baseline_id() == "hf-generate/fp32@cpu"
    ref = t.result.lm["accuracy_reference"]
    assert ref["kind"] == "cpu-fp32" and ref["why_not_gpu"].startswith("hf-generate/bf16 needs 15.5 GiB")
    int4 = next(f for f in t.result.lm["fit"] if f["candidate"] == "cuda-graph/bf16/torchao-int4")
    assert int4["fits"] and int4["weights_gib"] == 5.33 and int4["need_gib"] <= int4["free_gib"]
    # the worker is told where to run and how to load
    assert t.job(t.ref_cand)["device"] == "cpu" and t.job(t.ref_cand)["cpu_init"] is True


def test_a_roomy_card_changes_nothing():
    t = task("qwen3-0.6b.json")
    before = options(H100, quick=True)
    opts = screen(t, before, H100, free_gib=78.0)
    assert [(o.candidate.id, o.skip) for o in opts] == [(o.candidate.id, o.skip) for o in before]
    assert t.ref_cand is None and not t.stream and "accuracy_reference" not in t.result.lm
    assert all(f["fits"] for f in t.result.lm["fit"])


def test_qwen3_0_6b_with_the_free_memory_capped_below_its_bf16_footprint():
    """What the GPU run does (benchmarks/gpu/lm_capped_memory.sh): another process holds all but 1.55 GiB."""
    t = task("qwen3-0.6b.json")
    opts = screen(t, options(H100, quick=True), H100, free_gib=1.55, mem_available=64 * GIB)
    tried = [o.candidate.id for o in opts if not o.skip]
    assert tried == ["hf-generate/fp32@cpu", "cuda-graph/bf16/torchao-int8-wo", "vllm/bf16"], tried
    assert t.stream == {"cuda-graph/bf16/torchao-int8-wo"}
    bf16 = next(f for f in t.result.lm["fit"] if f["candidate"] == "hf-generate/bf16")
    assert not bf16["fits"] and bf16["weights_gib"] == 1.11  # 596M parameters in bf16
    # the 16-bit model cannot fit, so int8 is loaded layer by layer and its lm_head stays 16-bit
    int8 = next(f for f in t.result.lm["fit"] if f["candidate"] == "cuda-graph/bf16/torchao-int8-wo")
    assert int8["fits"] and int8["weights_gib"] == 0.7  # streamed: lm_head (tied) stays the 16-bit table


def test_a_cpu_run_is_not_checked():
    t, cpu = task("qwen3-0.6b.json"), Capabilities(device="cpu")
    before = options(cpu, quick=True)
    assert screen(t, before, cpu) == before and "fit" not in t.result.lm
