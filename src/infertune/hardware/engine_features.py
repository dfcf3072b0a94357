"""Which host features a tuned engine's speed rests on, from its candidate and the fingerprint of the host it was
tuned on. One rule read by `deploy` (node selectors and affinities) and by `serve`'s start-up host check, so the
pods are placed on, and the server warns about, the same features.

An engine needs a feature when its kernels use it: bf16 engines run on bf16 matrix units (AMX-BF16 if the tune
host had them, else AVX512-BF16), int8 engines on int8 dot products (AMX-INT8 for OpenVINO and torch on AMX,
AVX512-VNNI or AVX-VNNI, else AVX2 u8s8 kernels), fp32 engines need AVX2+FMA. Features the tune host had beyond
that (AVX-512 for an fp32 engine) made its figures, but the engine runs without them: they are `preferred`.
GPU engines need a compute capability (bf16 8.0, fp8 8.9), and the same product reproduces the figures."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# /proc/cpuinfo flag -> the CPUID name node-feature-discovery labels it with (cpu-cpuid.<NAME>, klauspost/cpuid)
NFD_CPUID = {"avx2": "AVX2", "fma": "FMA3", "avx512f": "AVX512F", "avx512bw": "AVX512BW", "avx512vl": "AVX512VL",
             "avx512_vnni": "AVX512VNNI", "avx_vnni": "AVXVNNI", "avx512_bf16": "AVX512BF16",
             "avx512_fp16": "AVX512FP16", "amx_tile": "AMXTILE", "amx_bf16": "AMXBF16", "amx_int8": "AMXINT8",
             "amx_fp16": "AMXFP16"}
# the flags, strongest first, that make an engine of each kind fast on x86
BF16_UNITS = ("amx_bf16", "avx512_bf16")
INT8_UNITS = ("amx_int8", "avx512_vnni", "avx_vnni")
WIDE = ("avx512f",)
GPU_MIN_CC = {"bf16": (8, 0), "fp8": (8, 9)}
ENGINE_PACKAGES = {"onnxruntime": "onnxruntime", "openvino": "openvino", "torch-eager": "torch",
                   "torch-compile": "torch"}


class EngineFeatures(BaseModel):
    """CPU flags (as /proc/cpuinfo spells them) an engine needs and those its tuned figures also had; on a GPU,
    the minimum compute capability and the product it was tuned on."""

    device: str = "cpu"
    arch: str = "amd64"  # kubernetes.io/arch
    required: list[str] = []
    preferred: list[str] = []
    why: list[str] = []  # one phrase per required feature
    gpu_min_cc: tuple[int, int] | None = None
    gpu_product: str | None = None
    gpu_cc: tuple[int, int] | None = None
    gpu_memory_mib: int | None = None
    tuned_on: bool = True  # False: no fingerprint, so only the engine's own minimum is known


def _kind(candidate: dict[str, Any]) -> str:
    p = str(candidate.get("precision", "fp32"))
    if p in ("bf16", "fp16", "fp8"):
        return p
    if "fp8" in str(candidate.get("quant") or ""):  # mixed fp8: the quantized layers set the floor
        return "fp8"
    if p in ("int8", "mixed") or candidate.get("quant"):
        return "int8"
    return "fp32"


def _cpu(cand: dict[str, Any], flags: set[str], tuned: bool) -> tuple[list[str], list[str], list[str]]:
    backend, kind = str(cand.get("backend", "")), _kind(cand)
    req: list[str] = []
    why: list[str] = []
    if kind in ("bf16", "fp16"):
        unit = next((f for f in BF16_UNITS if f in flags), "avx512_bf16")
        req, why = [unit], [f"{backend} {kind} runs on {'AMX tiles' if unit == 'amx_bf16' else 'AVX512-BF16'}"]
    elif kind == "int8":
        units = [f for f in INT8_UNITS if f in flags and (f != "amx_int8" or backend == "openvino")]
        if units:
            req, why = [units[0]], [f"{backend} int8 runs on {NFD_CPUID[units[0]]} dot products"]
        else:
            req, why = ["avx2"], [f"{backend} int8 was tuned on AVX2 u8s8 kernels (no VNNI on the tune host)"]
    if not req or req == ["avx2"]:
        req = ["avx2", "fma"]
        why = why or [f"{backend} {kind} needs AVX2+FMA"]
    preferred = [f for f in (*WIDE, *BF16_UNITS, *INT8_UNITS) if tuned and f in flags and f not in req
                 and (kind != "fp32" or f in WIDE)]
    return req, preferred, why


def engine_features(manifest: dict[str, Any]) -> EngineFeatures:
    """The features of an artifact's engine (manifest: the artifact's manifest.json)."""
    cand = manifest.get("candidate") or {}
    fp = manifest.get("fingerprint") or {}
    device = "cuda" if str(manifest.get("device", "cpu")).startswith("cuda") else "cpu"
    flags = set(fp.get("cpu_flags") or [])
    tuned = bool(fp)
    arch = "arm64" if flags & {"asimd", "sve"} else "amd64"
    if device == "cpu":
        if arch == "arm64":  # NFD names Arm features differently; only the architecture is selected
            return EngineFeatures(arch=arch, why=["an Arm CPU: placed by architecture only"], tuned_on=tuned)
        req, pref, why = _cpu(cand, flags, tuned)
        return EngineFeatures(arch=arch, required=req, preferred=pref, why=why, tuned_on=tuned)
    g = (fp.get("gpu") or [{}])[0]
    cc = tuple(int(x) for x in str(g.get("capability", "")).split(".")[:2] if x.isdigit()) or None
    kind = _kind(cand)
    packed = dict(cand.get("options") or []).get("batches") == "packed"  # FlashAttention varlen: Ampere or newer
    torchao = str(cand.get("quant") or "").startswith("torchao")  # its GPU kernels take bf16 activations
    need = GPU_MIN_CC.get(kind) or (GPU_MIN_CC["bf16"] if packed or torchao else None)
    what = ("packed batches (FlashAttention)" if packed and kind not in GPU_MIN_CC else
            "torchao int8 kernels (bf16 activations)" if torchao and kind not in GPU_MIN_CC else f"{kind} kernels")
    why = [f"{what} need compute capability >= {need[0]}.{need[1]}"] if need else []
    mem = g.get("memory_gb")
    return EngineFeatures(device="cuda", arch=arch, gpu_min_cc=need, gpu_product=g.get("name"),
                          gpu_cc=cc if cc and len(cc) == 2 else None, why=why, tuned_on=tuned,
                          gpu_memory_mib=int(mem * 1024) if mem else None)


def engine_package(manifest: dict[str, Any]) -> str | None:
    """The Python package whose version decides the engine's kernels (onnxruntime, openvino, torch)."""
    return ENGINE_PACKAGES.get(str((manifest.get("candidate") or {}).get("backend", "")))
