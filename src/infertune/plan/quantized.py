"""plan's quantized checkpoints: every scheme's rule read for the planned GPU
(quantize/llm_checkpoint_rules.py), the llm-compressor step that makes each candidate (quantize/llm_checkpoint_step.py)
and the `vllm serve` of its output. A quantized dtype is served from the directory its step writes, or
from a directory that is a quantized checkpoint already; never as a flag on unquantized weights (plan
used to print `--quantization awq_marlin` for a bf16 directory, which vLLM cannot load)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infertune.errors import InfertuneError
from infertune.hardware.capabilities import GPU, Capabilities
from infertune.quantize.llm_checkpoint_rules import BY_WEIGHTS, kv_cache_fp8, options
from infertune.quantize.llm_checkpoint_step import EVAL_FRACTION, CheckpointStep, llm_compressor_step

QUANTIZED = ("fp8", "int8", "int4")
AWQ_GPTQ = ("awq", "gptq", "awq_marlin", "gptq_marlin", "marlin")


def gpu_caps(g: dict[str, Any]) -> Capabilities:
    """The spec table's GPU as the capabilities the rules read (no GPU needed here)."""
    major, minor = (int(x) for x in str(g["cc"]).split("."))
    return Capabilities(device="cuda", gpus=(GPU(name=g["name"], capability=(major, minor),
                                                 memory_gb=float(g["memory_gib"])),))


def prequantized(raw: dict[str, Any]) -> tuple[str, str] | None:
    """(plan dtype, method) of a directory whose config.json says it is a quantized checkpoint already
    (compressed-tensors, AWQ, GPTQ, FP8), else None. An unknown method is sized as int4 and says so."""
    q = raw.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower() or "unknown"
    if method == "fp8":
        return "fp8", method
    if method in AWQ_GPTQ:
        return ("int4" if int(q.get("bits", 4)) <= 4 else "int8"), method
    for grp in (q.get("config_groups") or {}).values():  # compressed-tensors: the first group with weights
        w = (grp or {}).get("weights") or {}
        if w.get("num_bits") == 8:
            return ("fp8" if w.get("type") == "float" else "int8"), method
        if w.get("num_bits") == 4:
            return "int4", method
    return "int4", method


def calibration_count(prompts: list[int], how: str | None) -> int | None:
    """Requests in the workload's calibration split (None: no workload, or one that holds token counts only)."""
    if not prompts or not how or how == "token counts from the file":
        return None
    from infertune.workloads.buckets import stratified_split

    return len(stratified_split(prompts, EVAL_FRACTION)[0])


class QuantPlan:
    """The rules read for one GPU, and whether the model directory is a quantized checkpoint already."""

    def __init__(self, g: dict[str, Any], raw: dict[str, Any]):
        self.g = g
        caps = gpu_caps(g)
        self.cc = caps.gpus[0].capability
        self.rules = {o.weights: o for o in options(caps)}
        self.kv = kv_cache_fp8(caps)
        self.pre = prequantized(raw)
        self.half = caps.gpus[0].half  # the weights' 16-bit type, and a quantized model's activations
        self.act_dtype = "bfloat16" if self.half == "bf16" else "float16"

    def auto_order(self) -> list[str]:
        """Quantized dtypes to fall back to when bf16 does not fit, most accurate first: the 8-bit
        candidate (FP8 where it computes in FP8, else INT8), then INT4."""
        if self.pre:
            return [self.pre[0]]
        eight = next((d for d in ("fp8", "int8") if self.rules[d].status == "candidate"), None)
        return [d for d in (eight, "int4") if d and self.rules[d].status == "candidate"]

    def check(self, dtype: str) -> list[str]:
        """Notes for a --dtype the user chose; a scheme vLLM cannot serve on this GPU is a user mistake."""
        r = self.rules.get(dtype)
        if self.pre:  # the user's checkpoint: say so when vLLM would not run its scheme well (or at all) here
            return ([f"the checkpoint's {dtype} weights on {self.g['name']}: {r.reason}"]
                    if r and r.status == "dropped" else [])
        if r is None or r.status == "candidate":
            return []
        if r.loads:
            return [f"--dtype {dtype} on {self.g['name']}: {r.reason}"]
        ok = ", ".join(d for d, x in self.rules.items() if x.status == "candidate")
        raise InfertuneError(f"--dtype {dtype} on {self.g['name']}: {r.reason}; quantized dtypes vLLM serves there: "
                             f"{ok or 'none'}")

    def serving(self, dtype: str, model: str, name: str, **step_kw: Any
                ) -> tuple[str | None, CheckpointStep | None, list[str]]:
        """(directory vLLM serves instead of the model's, the step that makes it, notes)."""
        if self.pre:
            return None, None, [f"{model} is a quantized checkpoint already ({self.pre[1]}, planned as {self.pre[0]}): "
                                "vLLM reads the method from its config.json, so it is served as it is, with no "
                                "--quantization flag"]
        if dtype not in QUANTIZED:
            return None, None, []
        step = llm_compressor_step(BY_WEIGHTS[dtype], model, name, **step_kw)
        r = self.rules[dtype]
        c = step.calibration
        cal = (f"calibrated on the calibration split of {c['source']}: {c['split']}" if c["needed"]
               else "no calibration data needed")
        return step.output, step, [
            f"{dtype} weights are a checkpoint to make first: commands['llm-compressor'] runs llm-compressor's oneshot "
            f"with the {step.label} recipe ({cal}) and writes {step.output}, which `vllm serve` loads as "
            f"compressed-tensors on {r.kernel or 'its fallback kernel'}; install it in its own venv: {step.install}"]

    def candidates(self, fits: dict[str, bool], serve_cmd: Callable[[str, str], str], model: str, name: str,
                   **step_kw: Any) -> list[dict[str, Any]]:
        """Every scheme read for this GPU, with whether its weights fit, and for a candidate its step and the
        `vllm serve` of its output (what tune will measure; plan only names them)."""
        out = []
        for d, r in self.rules.items():
            row: dict[str, Any] = {**r.model_dump(), "fits": fits.get(d)}
            if r.status == "candidate" and not self.pre:
                step = llm_compressor_step(BY_WEIGHTS[d], model, name, **step_kw)
                row |= {"checkpoint": step.model_dump(), "vllm": serve_cmd(step.output, d)}
            out.append(row)
        return out

    def kv_notes(self, kv_dtype: str) -> list[str]:
        if kv_dtype != "fp8":
            return []
        if self.kv.status == "dropped":
            raise InfertuneError(f"--kv-cache-dtype fp8 on {self.g['name']}: {self.kv.reason}")
        return [f"--kv-cache-dtype fp8 on {self.g['name']}: {self.kv.kernel}; {self.kv.reason}"]
