"""Which causal-LM candidates to try on a device, as plain data.

backend: hf-generate (transformers generate(), dynamic cache: the naive baseline and the reference),
static (own decode loop over a StaticCache, eager step), static-compile (the decode step under
torch.compile, one graph per batch size), cuda-graph (the decode step captured once and replayed),
cuda-graph-compile (inductor-compiled step with eager attention, captured as one CUDA graph: the fastest
batch-1 decode measured on the H200),
vllm (skipped with a reason unless vLLM is importable here; `infertune serve` runs it from its own venv).
"""

from __future__ import annotations

import importlib.util

from pydantic import BaseModel, ConfigDict


class LMCandidate(BaseModel):
    """One way of running a causal LM. Frozen; `id` appears in logs, results and file names."""

    model_config = ConfigDict(frozen=True)
    backend: str
    precision: str = "fp32"  # the float dtype of activations and unquantized weights
    # int8-wo | torch.ao-dynamic | torchao-int8-wo | torchao-int8-dyn | torchao-int4 | torchao-fp8
    quant: str | None = None

    @property
    def id(self) -> str:
        return "/".join([self.backend, self.precision] + ([self.quant] if self.quant else []))

    @property
    def engine_id(self) -> str:
        return self.id


def reference(device: str) -> LMCandidate:
    """Eager generate() in the reference dtype: fp32 on CPU, bf16 on GPU. Also the naive baseline."""
    return LMCandidate(backend="hf-generate", precision="fp32" if device == "cpu" else "bf16")


def available(c: LMCandidate, device: str) -> str | None:
    """None if `c` can run here, else one sentence saying why not."""
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
