"""`infertune plan` for embedding models (encoder or decoder based): no key/value cache, no decode.

An embedder runs one forward pass per input and returns a pooled vector, so what a GPU has to hold is the
weights plus the activations of one batch, and what bounds its speed is the prefill roofline.

Memory (per GPU, one GPU: tensor parallel buys an embedder nothing but all-reduces):
  need = weights(dtype) + activations(T) + non-torch (CUDA context, library workspaces)
  activations(T) = T x b x (hidden x layers + m x intermediate)
where T is the batch token budget (padded tokens per forward pass), b the activation bytes (2 for bf16/fp16)
and m = 3 for a gated MLP (gate+up, 2I, and its product, I), 2 otherwise. The hidden x layers term keeps every
layer's output (what output_hidden_states=True holds): a no-grad forward frees each one after the next layer
reads it, so this over-counts on purpose; the m x intermediate term is the widest single-layer buffer. Attention
scores are not counted: SDPA / flash attention (infertune serve's torch default, vLLM, TensorRT's fused MHA) do not
materialise them. It fits when need <= GPU memory x --gpu-memory-utilization (0.9: 10% headroom).

Throughput bound (prefill roofline) for a batch of T tokens in inputs of length L (workload median, else 256):
  compute = T x FLOPs/token / peak;  FLOPs/token = 2 x Linear weights + attention over L keys (half for causal)
  memory  = (weight bytes + T x activation bytes each Linear reads and writes) / bandwidth
  tokens/s = T / max(compute, memory); whichever is larger names the bound.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infertune.hardware.capabilities import GPU
from infertune.hardware.gpu_specs import peak_tflops
from infertune.plan.arch import DTYPE_BYTES, Arch

GIB = 2**30
DEFAULT_TOKENS = 16384  # infertune serve's --batch-tokens default on CUDA
TYPICAL_LEN = 256  # input length for the throughput bound when no --workload says otherwise
VLLM_VERSION = "0.32"  # flags checked against vllm(-cpu) 0.32.0: --runner pooling, --convert embed


class EngineOption(BaseModel):
    name: str
    command: str
    why: str
    chosen: bool = False


class EmbedPlan(BaseModel):
    arch: str  # encoder | decoder
    why: str  # what decided it is an embedder
    batch_tokens: int
    input_len: int
    activation_model: str
    activation_bytes: int
    memory_need_bytes: int
    memory_available_bytes: int
    flops_per_token: float
    activation_io_bytes_per_token: float
    batch_ms_compute: float | None
    batch_ms_memory: float
    tokens_per_s: float
    items_per_s: float
    bound: str  # compute | memory (batch_ms_compute None: no published compute peak, memory side only)
    inputs: list[str]
    engines: list[EngineOption]
    # --calibrated-from RUN: the tune's results.json, the share of the bound its winner reached, the bound scaled by it
    calibrated_from: str | None = None
    efficiency: float | None = None
    calibrated_tokens_per_s: float | None = None
    calibrated_items_per_s: float | None = None


def act_bytes(dtype: str) -> int:
    return 4 if DTYPE_BYTES.get(dtype, 2) == 4 else 2


def activation_bytes(a: Arch, tokens: int, dtype: str) -> int:
    m = 3 if a.gated_mlp else 2
    return int(tokens * act_bytes(dtype) * (a.hidden * a.layers + m * a.intermediate))


def io_bytes_per_token(a: Arch, dtype: str) -> float:
    """Activation bytes the Linear layers read and write per token, all layers (inputs + outputs)."""
    h, d = a.hidden, a.head_dim
    attn = (h + (a.heads + 2 * a.kv_heads) * d) + (a.heads * d + h)
    mlp = (h + 2 * a.intermediate) + (a.intermediate + h) if a.gated_mlp else 2 * (h + a.intermediate)
    return float(a.layers * (attn + mlp) * act_bytes(dtype))


def flops_per_token(a: Arch, length: int, decoder: bool) -> float:
    fl = a.flops_per_token(length, "prefill")
    return fl["linear"] + fl["attention"] * (0.5 if decoder else 1.0)  # no lm_head: the pooled state is the output


def model_inputs(raw: dict[str, Any]) -> list[str]:
    """What the ONNX export (infertune.engines.onnx_export) takes: token_type_ids when the config has a type
    vocabulary."""
    from infertune.plan.arch import _text

    return ["input_ids", "attention_mask"] + (["token_type_ids"] if _text(raw).get("type_vocab_size") else [])


def st_max_seq_length(model_dir: str) -> int | None:
    f = Path(model_dir) / "sentence_bert_config.json"
    try:
        return int(json.loads(f.read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def vllm_pooling_cmd(model: str, *, decoder: bool, max_model_len: int, batch_tokens: int, util: float,
                     dtype: str) -> str:
    parts = ["vllm", "serve", model, "--runner", "pooling"]
    if decoder:  # a *ForCausalLM checkpoint: vLLM's auto runner would generate; convert adds LAST pooling + normalise
        parts += ["--convert", "embed"]
    parts += ["--max-model-len", str(max_model_len), "--max-num-batched-tokens", str(batch_tokens),
              "--gpu-memory-utilization", f"{util:g}", "--dtype", "float16" if dtype == "fp16" else "bfloat16"]
    return shlex.join(parts)


def trt_steps(onnx: str, lengths: list[int], cap: int, tokens: int, inputs: tuple[str, ...], precision: str,
              g: dict) -> dict[str, Any]:
    """trtexec build (a profile per length bucket, capped at `cap`) and benchmark lines, as export writes them."""
    from infertune.plan.tensorrt import length_profiles, one_line, trtexec_bench, trtexec_build

    profiles, _ = length_profiles(lengths, cap, tokens)
    workspace = int(min(4096, g["memory_gib"] * 1024 // 8))  # an eighth of the GPU, at most 4 GiB
    engine = onnx.rsplit(".", 1)[0] + ".plan"
    # export writes model.onnx in its --out directory
    build = trtexec_build("model.onnx", engine, profiles, inputs, precision, workspace)
    return {"build": one_line(build), "bench": one_line(trtexec_bench(engine, profiles[0], inputs)),
            "profiles": len(profiles)}


def roofline(a: Arch, g: dict, dtype: str, tokens: int, length: int, decoder: bool) -> dict[str, Any]:
    fpt = flops_per_token(a, length, decoder)
    io = io_bytes_per_token(a, dtype)
    bw = g["bandwidth_gbs"] * 1e9
    mem_s = (a.weights_bytes(dtype) + tokens * io) / bw
    peak = peak_tflops(g, dtype)
    comp_s = tokens * fpt / (peak * 1e12) if peak else None
    if comp_s is None:
        bound, t = "memory", mem_s  # no published tensor peak: only the memory side is known
    else:
        bound, t = ("compute", comp_s) if comp_s >= mem_s else ("memory", mem_s)
    return {"flops_per_token": fpt, "activation_io_bytes_per_token": io, "batch_ms_memory": mem_s * 1e3,
            "batch_ms_compute": comp_s * 1e3 if comp_s is not None else None, "tokens_per_s": tokens / t,
            "items_per_s": tokens / t / length, "bound": bound}


def plan_embedding(cfg, a: Arch, kind, raw: dict[str, Any], g: dict, total: float, wl: dict[str, Any],
                   notes: list[str], location: tuple[str, str], lengths: list[int] | None = None) -> dict[str, Any]:
    """The fields of a PlanResult for an embedder (the caller builds the result); `location` is
    planner.model_location's (name, directory); `lengths` the workload's input lengths in tokens."""
    from infertune.plan.commands import docker_cmd

    lengths = lengths or []

    decoder = kind.arch == "decoder"
    name, model_dir = location
    if not Path(cfg.model).expanduser().exists():  # an alias (minilm): its files sit in a directory named "model"
        name = Path(cfg.model).name
    context = _context(cfg, a, wl, lengths, model_dir, notes)
    tokens = max(cfg.max_num_batched_tokens or DEFAULT_TOKENS, context)
    if (cfg.gpus or 1) > 1 or (cfg.tensor_parallel_size or 1) > 1:
        notes.append("an embedder is planned on one GPU (tensor parallel only adds all-reduces): with more GPUs run "
                     "one replica each (infertune serve --devices 0,1,... or one vLLM server per GPU)")
    length = min(int(wl.get("prompt_p50") or TYPICAL_LEN), context)
    non_torch = cfg.non_torch_gib * GIB
    usable = total * cfg.gpu_memory_utilization

    def need(dtype: str) -> float:
        return a.weights_bytes(dtype) + activation_bytes(a, tokens, dtype) + non_torch

    dtype = _dtype(cfg, g, usable, need, notes)
    fits = need(dtype) <= usable
    if not fits:
        notes.append(f"needs {need(dtype) / GIB:.2f} GiB of {usable / GIB:.2f}: lower --max-num-batched-tokens "
                     f"({tokens} now), quantize the weights, or pick a larger GPU")
    act = activation_bytes(a, tokens, dtype)
    roof = roofline(a, g, dtype, tokens, length, decoder)
    inputs = model_inputs(raw)

    # vLLM: size --gpu-memory-utilization to what the model needs instead of reserving 90% of the GPU for a cache.
    # A decoder's attention still writes keys/values to vLLM's paged buffer for the tokens in flight.
    pages = a.kv_bytes_per_token("bf16") * max(tokens, context) if decoder else 0
    util = min(cfg.gpu_memory_utilization,
               max(0.05, math.ceil((need(dtype) + pages + 0.5 * GIB) / total * 20) / 20))
    cmds = _commands(cfg, kind, name, model_dir, g, decoder=decoder, context=context, tokens=tokens, dtype=dtype,
                     util=util, lengths=lengths, inputs=inputs)
    engines, chosen, reason = _engines(cfg, a, cmds, name, inputs, decoder=decoder, context=context, util=util)
    notes += _notes(cfg, a, tokens, length, decoder=decoder, pages=pages, context=context, util=util)
    emb = EmbedPlan(
        arch=kind.arch, why=kind.why, batch_tokens=tokens, input_len=length,
        activation_model="tokens x bytes x (hidden x layers + m x intermediate), m = 3 gated / 2 plain MLP",
        activation_bytes=act, memory_need_bytes=int(need(dtype)), memory_available_bytes=int(usable),
        inputs=inputs, engines=engines, **roof)
    return {
        "context": context, "dtype": dtype, "fits": fits, "embedding": emb,
        "engine_name": chosen, "engine_reasons": [reason, next(e.why for e in engines if e.chosen)],
        "memory_budget": {"total": total, "requested": usable, "weights": float(a.weights_bytes(dtype)),
                          "activation_peak": float(act), "non_torch": float(non_torch)},
        "commands": {"infertune-serve": cmds["serve"], "vllm-pooling": cmds["vllm"], "onnx-export": cmds["export"],
                     "trtexec": cmds["trt"]["build"], "trtexec-bench": cmds["trt"]["bench"],
                     "docker": docker_cmd(model_dir, name, cmds["vllm"], 1, 1)},
    }


def _context(cfg, a: Arch, wl: dict[str, Any], lengths: list[int], model_dir: str, notes: list[str]) -> int:
    """The longest input planned for: --context, else the workload's longest (rounded up to 64), else
    sentence-transformers' max_seq_length, else 8192, capped at what the model reads."""
    st_len = st_max_seq_length(model_dir)
    # the longest input the model reads: its position table, and sentence-transformers' max_seq_length below it
    limit = min(x for x in (a.max_positions, st_len, 1 << 30) if x)
    why_limit = "sentence_bert_config.json's max_seq_length" if st_len and st_len <= (a.max_positions or st_len) \
        else "max_position_embeddings"
    if cfg.context:
        context = cfg.context
    elif wl:
        context = int(math.ceil(wl["prompt_p100"] / 64) * 64)
    elif st_len:
        context = st_len
        notes.append(f"max input length {context} tokens from sentence_bert_config.json (pass --context to change)")
    else:
        context = min(a.max_positions or 8192, 8192)
        notes.append(f"no --context or --workload: planning for inputs up to {context} tokens")
    if context > limit:
        over = sum(1 for n in lengths if n > limit)
        which = (f"{over} of {len(lengths)} workload inputs are longer and would be truncated there "
                 "(infertune serve --truncate, vLLM truncate_prompt_tokens) or refused") if lengths \
            else "longer inputs would be truncated or refused"
        notes.append(f"inputs capped at {limit} tokens, the model's limit ({why_limit}): {which}")
        context = limit
    return context


def _dtype(cfg, g: dict, usable: float, need, notes: list[str]) -> str:
    """--dtype, else the 16-bit dtype this GPU has, or the first smaller one whose `need(dtype)` bytes fit."""
    gpu = GPU(capability=tuple(int(x) for x in g["cc"].split(".")))
    default16 = gpu.half
    if cfg.dtype != "auto":
        return cfg.dtype
    options = [default16] + (["fp8"] if gpu.fp8 else []) + ["int8", "int4"]
    dtype = next((d for d in options if need(d) <= usable), default16)
    if dtype != default16:
        notes.append(f"{default16} weights do not fit on {g['name']}; planning with {dtype}")
    return dtype


def _commands(cfg, kind, name: str, model_dir: str, g: dict, *, decoder: bool, context: int, tokens: int,
              dtype: str, util: float, lengths: list[int], inputs: list[str]) -> dict[str, Any]:
    """The three engines' commands: `infertune serve` ("serve"), vLLM's pooling runner ("vllm"), and the ONNX
    export ("export") with the TensorRT steps after it ("trt": build and bench)."""
    vcmd = vllm_pooling_cmd(model_dir, decoder=decoder, max_model_len=context, batch_tokens=tokens, util=util,
                            dtype=dtype)
    serve = ["infertune", "serve", cfg.model, "--device", "cuda", "--batch-tokens", str(tokens)]
    if kind.why.startswith("--task"):
        serve += ["--task", "embed"]
    exp = ["infertune", "export", cfg.model, "--to", "onnx", "--out", f"{name}-onnx"]
    if cfg.workload:
        exp += ["--workload", str(cfg.workload)]
    if kind.why.startswith("--task"):
        exp += ["--task", "embed"]
    trt = trt_steps(f"{name}.onnx", [min(n, context) for n in lengths], context, tokens, tuple(inputs),
                    "bf16" if dtype == "bf16" else "fp16", g)
    return {"serve": shlex.join(serve), "vllm": vcmd, "export": shlex.join(exp), "trt": trt}


def _engines(cfg, a: Arch, cmds: dict[str, Any], name: str, inputs: list[str], *, decoder: bool, context: int,
             util: float) -> tuple[list[EngineOption], str, str]:
    """(the three engines with their commands and why each, the chosen one's name, why it is chosen)."""
    why_serve = (("dynamic batching of variable-length requests under a token budget; on a GPU a decoder's batches "
                  "run padding-free (FlashAttention varlen) as CUDA graphs (H200, Qwen3-Embedding-0.6B shape, "
                  "concurrency 64: 75% of the forward-only ceiling)" if decoder else
                  "dynamic batching of variable-length requests under a token budget, length-sorted to cut padding, "
                  "replayed as CUDA graphs on a GPU")
                 + "; `infertune tune --device cuda` picks the backend and batch size on this GPU and serve loads the "
                 "artifact; OpenAI /v1/embeddings with instruction prompts and Matryoshka dimensions")
    why_vllm = (f"vLLM {VLLM_VERSION}'s pooling runner packs variable-length inputs without padding and runs its "
                "flash/paged attention kernels" + (
                    "; for a causal model with last-token pooling it keeps chunked prefill and prefix caching, so long "
                    "inputs do not stall short ones (best for long or mixed-length inputs)" if decoder else
                    "; for an encoder (bidirectional attention) vLLM turns chunked prefill and prefix caching off, and "
                    "its docs say pooling support is for convenience, not a speed-up over Sentence Transformers")
                + (f"; --gpu-memory-utilization {util:g} instead of vLLM's default 0.9, which would reserve most of "
                   "the GPU for a cache an embedder does not need" if util < 0.9 else
                   f"; --gpu-memory-utilization {util:g}: the weights and batch activations need that much"))
    why_trt = (f"a TensorRT engine compiled for this GPU with one optimisation profile per input-length bucket "
               f"({cmds['trt']['profiles']} profiles over lengths 1-{context}, every input named: {', '.join(inputs)}) "
               "gives the lowest latency when shapes are known; `infertune export` writes and checks the ONNX (and "
               "tensorrt.sh with these steps); the engine must be rebuilt per GPU and shape range, and batching and "
               "picking the profile are left to the server in front of it (infertune serve does not run TensorRT)")
    if cfg.fixed_shapes:
        chosen = "tensorrt"
    elif decoder and (a.params() > 1e9 or context > 2048):
        chosen = "vllm-pooling"
    else:
        chosen = "infertune-serve"
    trt_cmd = f"{cmds['export']} && cd {shlex.quote(name + '-onnx')} && {cmds['trt']['build']}"
    engines = [EngineOption(name="infertune-serve", command=cmds["serve"], why=why_serve),
               EngineOption(name="vllm-pooling", command=cmds["vllm"], why=why_vllm),
               EngineOption(name="tensorrt", command=trt_cmd, why=why_trt)]
    for e in engines:
        e.chosen = e.name == chosen
    reason = {"tensorrt": "--fixed-shapes: inputs of known shape, so a compiled engine",
              "vllm-pooling": f"a decoder embedder with {a.params() / 1e9:.2f} B parameters and inputs up to {context} "
                              "tokens: chunked prefill keeps long inputs from stalling short ones (both it and "
                              "infertune serve batch without padding)",
              "infertune-serve": "a small embedder: per-request overhead and padding, not attention kernels, decide; "
                                 "tune measures the backends on this GPU"}[chosen]
    return engines, chosen, reason


def _notes(cfg, a: Arch, tokens: int, length: int, *, decoder: bool, pages: float, context: int,
           util: float) -> list[str]:
    """What the memory model and the throughput bound assume, and where vLLM's paged memory goes."""
    notes = [f"activations for {tokens} batched tokens: tokens x (hidden x layers + {3 if a.gated_mlp else 2} x "
             "intermediate) x bytes (every layer's output kept: an upper bound); attention scores not "
             f"materialised (SDPA/flash); non-torch memory {cfg.non_torch_gib} GiB",
             f"throughput bound at {tokens}-token batches of {length}-token inputs: spec peak and bandwidth "
             "(an upper bound, not a measurement: small models are held back by kernel launches and the tokenizer)"]
    if decoder:
        notes.append(f"vLLM reserves paged attention memory for the tokens in flight ({pages / GIB:.2f} GiB at "
                     f"{max(tokens, context)} tokens); that is inside --gpu-memory-utilization {util:g}")
    return notes
