"""Capability detection and the capability -> candidate rules, on CPUs and GPUs this box is not:
the flags are faked, so the rules are checked on an AMX Xeon, an AVX2-only EPYC and several GPUs
whichever machine runs the suite."""

import pytest

from infertune.hardware import CPU, GPU, Capabilities, needs
from infertune.hardware.capabilities import read_cpu

AMX = "fma avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8 avx512_fp16"
AVX2 = "fma avx2"  # AMD EPYC Zen 3
AVX512_VNNI = "fma avx2 avx512f avx512bw avx512vl avx512_vnni"  # Cascade Lake: int8 dot products, no bf16


def caps(flags: str, device="cpu", gpu=None) -> Capabilities:
    return Capabilities(device=device, cpu=read_cpu(flags), gpus=(gpu,) if gpu else ())


def test_isa_phrases_and_properties():
    assert caps(AMX).cpu.isa() == "AVX-512 + VNNI + BF16 + FP16 + AMX"
    assert caps(AVX2).cpu.isa() == "AVX2+FMA, no VNNI/BF16/AMX"
    c = caps(AVX512_VNNI).cpu
    assert c.vnni and not c.bf16 and not c.amx and c.avx512


def test_override_is_reported(monkeypatch):
    monkeypatch.setenv("INFERTUNE_CPU_FLAGS", "avx2,fma")
    c = read_cpu()
    assert c.flags == {"avx2", "fma"} and c.flags_source == "INFERTUNE_CPU_FLAGS"
    assert "INFERTUNE_CPU_FLAGS" in Capabilities(cpu=c).summary()


def test_fingerprint_and_doctor_record_the_real_flags(monkeypatch):
    """INFERTUNE_CPU_FLAGS fakes a host for the candidate rules; results.json and doctor record the CPU the
    kernels ran on, read by the same reader."""
    from infertune.doctor.probes import host
    from infertune.hardware.fingerprint import fingerprint

    real = read_cpu(real=True)
    monkeypatch.setenv("INFERTUNE_CPU_FLAGS", "sve")
    assert read_cpu().flags == {"sve"}
    assert fingerprint().cpu_flags == sorted(real.flags) == host()["cpu_flags"]
    assert fingerprint().cpu_model == real.model == host()["cpu_model"]


def test_needs_names_the_missing_capability():
    assert needs(caps(AMX), ["cpu-bf16", "cpu-vnni"]) is None
    why = needs(caps(AVX2), ["cpu-bf16"])
    assert "no native bf16" in why and "AVX2+FMA" in why
    assert "VNNI" in needs(caps(AVX2), ["cpu-vnni"])
    assert "needs a CUDA GPU" in needs(caps(AVX2), ["gpu-bf16"])
    t4 = GPU(name="Tesla T4", capability=(7, 5), memory_gb=15)
    assert "8.0" in needs(caps(AVX2, "cuda", t4), ["gpu-bf16"])
    l4 = GPU(name="L4", capability=(8, 9))
    assert needs(caps(AVX2, "cuda", l4), ["gpu-bf16", "gpu-fp8"]) is None
    a100 = GPU(name="A100", capability=(8, 0))
    assert "8.9" in needs(caps(AVX2, "cuda", a100), ["gpu-fp8"])


def _tried(opts, c):
    return [o.candidate.id for o in opts if needs(c, o.needs) is None]


@pytest.mark.parametrize("flags,bf16,ov_int8", [(AMX, True, True), (AVX2, False, False), (AVX512_VNNI, False, True)])
def test_embedding_candidates_follow_the_cpu(flags, bf16, ov_int8):
    from infertune.tasks.embedding.candidates import options

    c = caps(flags)
    ids = _tried(options(c, quick=False), c)
    assert any("bf16" in i for i in ids) == bf16
    assert any(i.startswith("openvino/int8") for i in ids) == ov_int8
    # lossless engines and int8 with calibration are tried everywhere
    for must in ("torch-eager/fp32", "onnxruntime/int8/ort-dynamic", "onnxruntime/int8/ort-static", "openvino/fp32"):
        assert any(i.startswith(must) for i in ids)
    skipped = {o.candidate.id: needs(c, o.needs) for o in options(c) if needs(c, o.needs)}
    assert all(skipped.values())  # every skip says why


def test_the_search_order_follows_the_cpu():
    from infertune.tasks.embedding.candidates import options

    def first(flags):
        c = caps(flags)
        opts = [o for o in options(c) if o.role == "candidate" and needs(c, o.needs) is None]
        return max(opts, key=lambda o: o.prior).candidate.id

    # AMX: an engine that uses its matrix units first (OpenVINO int8 through VNNI/AMX, measured 3.0x fp32)
    assert first(AMX).startswith("openvino/int8/")
    # AVX2 only: ORT's u8s8 int8 kernels (1.8x fp32 there); no bf16, no OpenVINO int8
    assert first(AVX2).startswith("onnxruntime/int8/ort-dynamic")


def test_gpu_embedding_candidates_follow_compute_capability():
    from infertune.tasks.embedding.candidates import options

    t4 = caps(AVX2, "cuda", GPU(name="T4", capability=(7, 5)))
    h200 = caps(AMX, "cuda", GPU(name="H200", capability=(9, 0)))
    assert not any("bf16" in i or "fp8" in i for i in _tried(options(t4), t4))
    ids = _tried(options(h200), h200)
    assert any("bf16" in i for i in ids) and any("fp8" in i for i in ids)
    assert not any("fp8" in i for i in _tried(options(h200, quick=True), h200))


def test_causal_lm_candidates_follow_the_cpu_and_gpu():
    from infertune.tasks.causal_lm.candidates import options

    amx, avx2 = caps(AMX), caps(AVX2)
    assert any("bf16" in i for i in _tried(options(amx, True), amx))
    # on an AVX2-only CPU bf16 would be emulated: not tried (it once was, and ran slower)
    assert not any("bf16" in i and not i.startswith("vllm") for i in _tried(options(avx2, True), avx2))
    h200 = caps(AMX, "cuda", GPU(name="H200", capability=(9, 0)))
    opts = [o for o in options(h200, True) if o.role == "candidate" and needs(h200, o.needs) is None]
    assert max(opts, key=lambda o: o.prior).candidate.id == "cuda-graph-compile/bf16"


def test_cpu_model_is_plain_data():
    c = CPU(model="x", flags=frozenset({"avx2", "fma"}), cores=2)
    assert c.avx2 and not c.avx512 and c.isa().startswith("AVX2")


def test_gpu_embedding_search_leads_with_the_compiled_engine_in_graphs():
    """Compiled block by block and served in CUDA graphs, inductor's engine is the one expected to win on a GPU
    (2.5x eager on an H100 for a 0.6B decoder): it is probed first, the eager half-precision engines after it, and
    a decoder's compiled engine runs bf16 (fp16 can overflow in a decoder's activations), an encoder's fp16."""
    from infertune.tasks.embedding.candidates import options

    h200 = caps(AMX, "cuda", GPU(name="H200", capability=(9, 0)))
    for arch, half in (("encoder", "fp16"), ("decoder", "bf16")):
        opts = sorted((o for o in options(h200, quick=True, arch=arch) if o.role == "candidate"
                       and needs(h200, o.needs) is None), key=lambda o: -o.prior)
        ids = [o.candidate.id for o in opts]
        assert opts[0].candidate.backend == "torch-compile" and opts[0].candidate.precision == half
        assert {"torch-eager/fp16/tokens-16384", "torch-eager/bf16/tokens-16384"} <= set(ids)
        assert not any(o.candidate.option("mode") == "reduce-overhead" for o in opts)
    full = [o.candidate.id for o in options(h200, quick=False, arch="decoder")]
    assert "torch-compile/fp8/torchao-fp8/tokens-16384" in full
