"""TensorRT steps that are right for the model: `plan` prints them, `export` writes them as a script to run where
TensorRT is installed (infertune itself never builds an engine). Torch-free.

Encoders (and decoder embedders: one forward pass, no cache) go ONNX -> `trtexec`, with one optimisation profile
per length bucket of the workload: TensorRT picks kernels for a profile's opt shape, so one profile from 1 to 512
tokens tunes for one length and pads or runs slow kernels everywhere else. Generators go the TensorRT-LLM route
(checkpoint -> `trtllm-build` -> `trtllm-serve`): a causal LM's decode loop and paged KV cache are not in an ONNX
graph that trtexec could build.

Every flag printed here is in data/tool_flags.toml, the tools' documented flags (a unit test holds them to it).
"""

from __future__ import annotations

import shlex
import statistics
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files

from infertune.workloads.buckets import BUCKETS, bucket_of

MAX_ROWS = 1024  # batch dimension cap of a profile: past it a bigger batch buys nothing on any current GPU
PRECISION_FLAG = {"fp16": ["--fp16"], "bf16": ["--bf16"], "int8": ["--int8"], "fp8": ["--fp8"], "fp32": []}
# model_type -> directory of its convert_checkpoint.py under TensorRT-LLM's examples/models/core/
_FAMILY = {"llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen", "qwen3": "qwen",
           "qwen2_moe": "qwen", "qwen3_moe": "qwen", "gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma",
           "phi3": "phi", "phi": "phi", "gpt2": "gpt", "deepseek_v2": "deepseek_v2", "falcon": "falcon"}


@lru_cache(maxsize=1)
def tool_flags() -> dict[str, dict]:
    return tomllib.loads((files("infertune") / "data" / "tool_flags.toml").read_text())


@dataclass(frozen=True)
class Profile:
    """One TensorRT optimisation profile: the shapes of every input for inputs of min_len..max_len tokens."""

    min_len: int
    opt_len: int
    max_len: int
    rows: int  # batch dimension at opt and max (min: 1)
    items: int  # workload inputs that fall in it

    def shapes(self, which: str, inputs: tuple[str, ...]) -> str:
        b, n = {"min": (1, self.min_len), "opt": (self.rows, self.opt_len), "max": (self.rows, self.max_len)}[which]
        return ",".join(f"{i}:{b}x{n}" for i in inputs)


def length_profiles(lengths: list[int], cap: int, batch_tokens: int) -> tuple[list[Profile], int]:
    """Contiguous profiles from 1 to `cap` tokens, one per workload length bucket that holds inputs (an empty
    bucket joins the next one), opt at the bucket's median length. Lengths above `cap` are what the model
    truncates; they count in the last profile. Returns (profiles, inputs over cap). Without lengths, one
    profile per bucket up to cap, opt at the bucket's middle."""
    cap = max(1, cap)
    over = sum(1 for n in lengths if n > cap)
    groups: dict[int, list[int]] = {}
    for n in lengths:
        groups.setdefault(bucket_of(min(n, cap)), []).append(min(n, cap))
    if not lengths:
        groups = {}
        for i, hi in enumerate(BUCKETS):
            lo = 1 if i == 0 else BUCKETS[i - 1] + 1
            if lo > cap:
                break
            groups[i] = [max(lo, (lo + min(hi, cap)) // 2)]
    out: list[Profile] = []
    start = 1
    for k, i in enumerate(sorted(groups)):
        last = k == len(groups) - 1
        hi = cap if last else min(BUCKETS[i], cap)
        opt = max(start, min(hi, int(statistics.median(groups[i]))))
        rows = max(1, min(MAX_ROWS, batch_tokens // opt))
        out.append(Profile(start, opt, hi, rows, len(groups[i]) if lengths else 0))
        start = hi + 1
    return out, over


def trtexec_build(onnx: str, engine: str, profiles: list[Profile], inputs: tuple[str, ...], precision: str,
                  workspace_mib: int, opt_level: int = 5) -> list[tuple[str, list[str]]]:
    """(comment, argv) pairs whose argv joined is one trtexec build command; comments say why each flag."""
    parts: list[tuple[str, list[str]]] = [
        ("build only: timing the engine is the next command's job", ["trtexec", f"--onnx={onnx}",
                                                                    f"--saveEngine={engine}", "--skipInference"])]
    for n, p in enumerate(profiles):
        parts.append((f"profile {n}: inputs of {p.min_len}-{p.max_len} tokens (workload inputs in it: {p.items}), "
                      f"tuned for {p.rows} x {p.opt_len}; every input named",
                      [f"--minShapes={p.shapes('min', inputs)}", f"--optShapes={p.shapes('opt', inputs)}",
                       f"--maxShapes={p.shapes('max', inputs)}"]))
    prec = PRECISION_FLAG.get(precision, ["--fp16"])
    why = {"fp16": "fp16 kernels (tensor cores); TensorRT keeps fp32 where a layer has no fp16 tactic",
           "bf16": "bf16 kernels: fp32's range at 16-bit cost (Ampere and newer)",
           "int8": "int8 kernels: needs a QDQ (quantized) ONNX or calibration, else TensorRT runs those layers at "
                   "higher precision", "fp8": "fp8 kernels (Ada/Hopper and newer): needs a QDQ ONNX with fp8 scales",
           "fp32": "no reduced precision flag: fp32 (TF32 matmuls where the GPU has them)"}
    if prec:
        parts.append((why.get(precision, why["fp16"]), prec))
    parts += [
        ("keep the measured layer timings: a rebuild (new shapes, new ONNX) skips re-timing the same layers; "
         "the cache is valid for this GPU model and TensorRT version only", ["--timingCacheFile=timing.cache"]),
        (f"cap the scratch memory tactics may use at {workspace_mib} MiB (the default is the whole GPU, "
         "which leaves nothing for the server's batches or a second engine)",
         [f"--memPoolSize=workspace:{workspace_mib}"]),
        (f"optimisation level {opt_level} of 0-5 (default 3): a longer build that tries more tactics; "
         "the build runs once per GPU and shape range", [f"--builderOptimizationLevel={opt_level}"]),
    ]
    return parts


def trtexec_bench(engine: str, profile: Profile, inputs: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    return [("time the engine at profile 0's typical shape (trtexec runs profile 0)",
             ["trtexec", f"--loadEngine={engine}", f"--shapes={profile.shapes('opt', inputs)}"]),
            ("replay each batch's kernel launches as one CUDA graph: for a small encoder the launches cost as much "
             "as the math, and a server that uses CUDA graphs (infertune serve does) sees this figure",
             ["--useCudaGraph"]),
            ("GPU time only: leave out the host<->device copies a server overlaps with compute",
             ["--noDataTransfers"])]


def checkpoint_step(model_dir: str, model_type: str, dtype: str, tp: int, pp: int,
                    half: str = "bf16") -> list[tuple[str, list[str]]]:
    """A TensorRT-LLM checkpoint from a Hugging Face directory: ModelOpt quantization for fp8/int4 weights, the
    family's converter for 16-bit ones. Both scripts live in a TensorRT-LLM checkout ($TRTLLM). `half`: the
    16-bit type of the quantized model's other tensors (fp16 where the GPU has no bf16)."""
    if dtype in ("fp8", "int4", "int8"):
        qformat = {"fp8": "fp8", "int4": "int4_awq", "int8": "int8_sq"}[dtype]
        return [(f"ModelOpt post-training quantization ({qformat}, calibrated on 512 samples) into a TensorRT-LLM "
                 "checkpoint", ["python", "$TRTLLM/examples/quantization/quantize.py", "--model_dir", model_dir,
                                "--dtype", "float16" if half == "fp16" else "bfloat16", "--qformat", qformat,
                                "--kv_cache_dtype", "fp8", "--calib_size", "512", "--output_dir", "trtllm-ckpt",
                                "--tp_size", str(tp), "--pp_size", str(pp)])]
    family = _FAMILY.get(model_type, "llama")
    return [(f"16-bit weights into a TensorRT-LLM checkpoint split for TP={tp} x PP={pp} (the converter of the "
             f"{family} family; before TensorRT-LLM 0.17 it sat in examples/{family}/)",
             ["python", f"$TRTLLM/examples/models/core/{family}/convert_checkpoint.py", "--model_dir", model_dir,
              "--output_dir", "trtllm-ckpt", "--dtype", "float16" if dtype == "fp16" else "bfloat16",
              "--tp_size", str(tp), "--pp_size", str(pp)])]


def trtllm_steps(model_dir: str, model_type: str, dtype: str, *, tp: int, pp: int, max_batch: int,
                 max_input: int, max_seq: int, max_tokens: int, half: str = "bf16"
                 ) -> dict[str, list[tuple[str, list[str]]]]:
    """checkpoint -> trtllm-build -> trtllm-serve, with lengths from the workload (capped by the caller)."""
    build = [("compile the checkpoint into engines for this GPU", ["trtllm-build", "--checkpoint_dir", "trtllm-ckpt",
                                                                   "--output_dir", "trtllm-engine"]),
             (f"at most {max_batch} sequences in flight, prompts up to {max_input} tokens, prompt + output up to "
              f"{max_seq}", ["--max_batch_size", str(max_batch), "--max_input_len", str(max_input),
                             "--max_seq_len", str(max_seq)]),
             (f"{max_tokens} tokens per engine step (prefill chunks and decodes together)",
              ["--max_num_tokens", str(max_tokens)])]
    serve = [("OpenAI-compatible server on the engines (TensorRT-LLM >= 1.0 needs --backend tensorrt for an "
              "engine directory; 0.x ran engines by default and has no such choice)",
              ["trtllm-serve", "trtllm-engine", "--tokenizer", model_dir, "--backend", "tensorrt",
               "--max_batch_size", str(max_batch), "--max_num_tokens", str(max_tokens), "--max_seq_len", str(max_seq),
               "--tp_size", str(tp), "--pp_size", str(pp), "--host", "0.0.0.0", "--port", "8000"])]
    return {"tensorrt-llm-checkpoint": checkpoint_step(model_dir, model_type, dtype, tp, pp, half),
            "trtllm-build": build, "trtllm-serve": serve}


def one_line(parts: list[tuple[str, list[str]]]) -> str:
    """The command as one shell line (what `plan` prints); `$TRTLLM` in double quotes, for the shell to expand."""
    words = [w for _, argv in parts for w in argv]
    return " ".join(_word(w) for w in words)


def _word(w: str) -> str:
    return f'"{w}"' if w.startswith("$TRTLLM/") else shlex.quote(w)


def script(steps: list[tuple[str, list[tuple[str, list[str]]]]], header: str) -> str:
    """A bash script: each step's arguments in an array, each group under its comment (bash allows comments
    inside an array's parentheses, not between continued lines), then the tool run on the array."""
    out = ["#!/usr/bin/env bash", *(f"# {line}" for line in header.splitlines()), "set -euo pipefail", ""]
    for n, (title, parts) in enumerate(steps):
        tool, first = parts[0][1][0], parts[0][1][1:]
        if tool == "python":
            tool, first = f"python {_word(first[0])}", first[1:]
        out += [f"# --- {title}", f"step{n}=("]
        for comment, argv in [(parts[0][0], first), *parts[1:]]:
            out += [f"  # {comment}", "  " + " ".join(_word(w) for w in argv)]
        out += [")", f'{tool} "${{step{n}[@]}}"', ""]
    return "\n".join(out)
