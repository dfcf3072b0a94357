"""Which causal-LM engines to try on this host, from what it can do, most promising first.

CPU: bf16 needs native bf16 (AVX512-BF16 or AMX): on an AVX2-only EPYC it is emulated and slower than
fp32, so it is not tried there. GPU: bf16 needs compute capability 8.0, fp8 8.9. The compiled, graph-
captured step (cuda-graph-compile) comes first on GPU: it was the fastest batch-1 decode measured on the
H200 (22.1% of the memory roofline for the Qwen3-0.6B shape, docs/measurements/2026-11-29-h200-decode), and
its compile must start while the budget is fresh.

Each candidate is an LMCandidate (plain data, which the worker builds). backend: hf-generate (transformers
generate(), dynamic cache: the naive baseline and the reference), static (own decode loop over a StaticCache,
eager step), static-compile (the decode step under torch.compile, one graph per batch size), cuda-graph (the
decode step captured once and replayed), cuda-graph-compile (inductor-compiled step with eager attention,
captured as one CUDA graph: the fastest batch-1 decode measured on the H200), vllm (skipped with a reason unless
vLLM is importable here; `infertune serve` runs it from its own venv).
"""

from __future__ import annotations

import importlib.util

from pydantic import BaseModel, ConfigDict

from infertune.hardware import Capabilities
from infertune.tuning.task import Option


class LMCandidate(BaseModel):
    """One way of running a causal LM. Frozen; `id` appears in logs, results and file names."""

    model_config = ConfigDict(frozen=True)
    backend: str
    precision: str = "fp32"  # the float dtype of activations and unquantized weights
    # int8-wo | torch.ao-dynamic | torchao-int8-wo | torchao-int8-dyn | torchao-int4 | torchao-fp8
    quant: str | None = None
    device: str | None = None  # where it runs when not the tune's --device (a reference too big for the GPU: cpu)

    @property
    def id(self) -> str:
        return "/".join([self.backend, self.precision] + ([self.quant] if self.quant else [])) + (
            f"@{self.device}" if self.device else "")

    @property
    def engine_id(self) -> str:
        return self.id


def reference(device: str) -> LMCandidate:
    """Eager generate() in the reference dtype: fp32 on CPU, bf16 on GPU. Also the naive baseline."""
    return LMCandidate(backend="hf-generate", precision="fp32" if device == "cpu" else "bf16")


def available(c: LMCandidate, device: str) -> str | None:
    """None if `c` can run here, else one sentence saying why not."""
    device = c.device or device
    if c.backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            return ("vLLM is not importable in this Python; it runs as a server from its own venv "
                    "(`infertune serve <artifact>`), measured with `infertune bench --api chat`")
        return "vLLM runs as a server, not in-process: serve the artifact and measure it with `infertune bench`"
    if c.backend in ("cuda-graph", "cuda-graph-compile") and device != "cuda":
        return "CUDA graphs need a CUDA GPU"
    if c.quant in ("torch.ao-dynamic", "int8-wo") and device != "cpu":
        return f"{c.quant} uses CPU int8 kernels; on GPU try the torchao candidates"
    if c.quant and c.quant.startswith("torchao"):
        if importlib.util.find_spec("torchao") is None:
            return "torchao is not installed (pip install torchao)"
        if c.quant in ("torchao-fp8", "torchao-int4") and device != "cuda":
            return f"{c.quant} kernels need a CUDA GPU"
        if c.quant == "torchao-fp8":
            from infertune.hardware.gpus import read_gpus

            gpu = next(iter(read_gpus()), None)
            if gpu is None or gpu.capability < (8, 9):
                return f"fp8 needs compute capability >= 8.9; this GPU is {gpu.capability if gpu else 'not visible'}"
    if device == "cpu" and c.precision == "fp16":
        return "fp16 matmuls are slow or missing on CPU; bf16 is the CPU half type"
    return None


def options(caps: Capabilities, quick: bool = False) -> list[Option]:
    dev = caps.device
    C = LMCandidate
    out = [Option(reference(dev), "eager generate() with a dynamic cache: the naive baseline and the accuracy "
                                  "reference", 1.0, role="reference")]
    if dev == "cpu":
        amx = caps.cpu.amx
        out += [
            Option(C(backend="static", precision="fp32"), "own decode loop over a static cache: no per-step "
                   "cache growth or generate() overhead", 1.4),
            Option(C(backend="static", precision="bf16"), "static cache, bf16 weights: half the bytes per step"
                   + (" on AMX tiles" if amx else ""), 1.9 if amx else 1.5, needs=("cpu-bf16",)),
            Option(C(backend="static", precision="bf16", quant="int8-wo"), "int8 weight-only Linear layers "
                   "(a quarter of the fp32 bytes per step), bf16 activations", 1.8, needs=("cpu-bf16",)),
            Option(C(backend="static", precision="fp32", quant="torch.ao-dynamic"),
                   "torch.ao dynamic int8 Linear layers, fp32 elsewhere", 1.3 if caps.cpu.vnni else 1.1,
                   # without VNNI int8 dot products are emulated: 0.15x the fp32 loop on a 2-core EPYC
                   skip=None if caps.cpu.vnni or not quick else "not in --quick: this CPU has no VNNI, so int8 "
                   "dot products are emulated and dynamic int8 is slower than fp32 here"),
            Option(C(backend="hf-generate", precision="bf16"), "generate() with bf16 weights", 1.2,
                   needs=("cpu-bf16",)),
        ]
        if not quick:  # each compile costs 1-2 min per batch size on 2 cores
            out += [Option(C(backend="static-compile", precision="bf16"), "the decode step compiled by inductor, "
                           "bf16", 2.0, needs=("cpu-bf16",), probe_s=240.0),
                    Option(C(backend="static-compile", precision="fp32"), "the decode step compiled by inductor",
                           1.6, probe_s=240.0)]
    else:
        out += [
            Option(C(backend="cuda-graph-compile", precision="bf16"), "inductor-compiled step with fused eager "
                   "attention, captured as one CUDA graph", 6.0, needs=("gpu-bf16",), probe_s=300.0),
            Option(C(backend="cuda-graph", precision="bf16"), "the decode step captured as a CUDA graph "
                   "(launch overhead gone)", 5.0, needs=("gpu-bf16",), probe_s=120.0),
            Option(C(backend="cuda-graph", precision="bf16", quant="torchao-int8-wo"), "CUDA graph + torchao "
                   "int8 weight-only (half the bytes per step)", 4.5, needs=("gpu-bf16",), probe_s=120.0),
            Option(C(backend="cuda-graph", precision="fp16"), "CUDA graph, fp16", 4.9, probe_s=120.0),
            Option(C(backend="static", precision="bf16"), "static cache, eager step", 2.0, needs=("gpu-bf16",)),
            Option(C(backend="hf-generate", precision="fp16"), "generate(), fp16", 1.0),
        ]
        if not quick:
            out += [Option(C(backend="cuda-graph", precision="bf16", quant="torchao-int4"), "CUDA graph + torchao "
                           "int4 weight-only", 4.0, needs=("gpu-bf16",), probe_s=120.0),
                    Option(C(backend="cuda-graph", precision="bf16", quant="torchao-fp8"), "CUDA graph + torchao "
                           "fp8", 4.0, needs=("gpu-fp8",), probe_s=120.0),
                    # an eager step: torchao's dynamic activation quantization does not capture ("operation
                    # failed due to a previous error during capture" on the H200:
                    # docs/measurements/2026-12-02-h200-torchao-installed)
                    Option(C(backend="static", precision="bf16", quant="torchao-int8-dyn"), "torchao int8 dynamic "
                           "(int8 activations and weights), eager step: its quantization does not capture as a "
                           "CUDA graph", 1.5, needs=("gpu-bf16",))]
    out.append(Option(C(backend="vllm", precision="bf16"), "vLLM's paged-attention engine (as a server)", 3.0))
    return out
