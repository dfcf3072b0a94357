"""Exact commands for the planned deployment: `vllm serve`, `docker run` and llama.cpp's `llama-server`
(TensorRT's: plan/tensorrt.py; the llm-compressor step that makes a quantized checkpoint:
llm/checkpoint_step.py)."""

from __future__ import annotations

import shlex

from infertune.plan.arch import Arch

GIB = 2**30


def vllm_cmd(model: str, *, max_model_len: int, max_num_seqs: int, util: float, tp: int, kv_dtype: str,
             dtype: str, served_path: str | None = None, pp: int = 1, act_dtype: str | None = None) -> str:
    """`vllm serve` for `served_path` (else `model`). Never a `--quantization` flag: a quantized checkpoint
    says what it is in its config.json (compressed-tensors, AWQ, GPTQ, FP8) and vLLM picks the kernel from it,
    while a flag on an unquantized directory names a checkpoint that does not exist (awq_marlin) and a flag
    that differs from the checkpoint's method is refused at load. `act_dtype` sets the 16-bit type of a
    quantized model's activations (float16 where the GPU has no bf16)."""
    parts = ["vllm", "serve", served_path or model, "--max-model-len", str(max_model_len),
             "--max-num-seqs", str(max_num_seqs), "--gpu-memory-utilization", f"{util:g}",
             "--tensor-parallel-size", str(tp), "--kv-cache-dtype", "fp8" if kv_dtype == "fp8" else "auto"]
    if pp > 1:
        parts += ["--pipeline-parallel-size", str(pp)]
    if dtype in ("bf16", "fp16"):
        parts += ["--dtype", "bfloat16" if dtype == "bf16" else "float16"]
    elif act_dtype:
        parts += ["--dtype", act_dtype]
    return shlex.join(parts)


def docker_cmd(model_dir: str, name: str, vllm_args: str, gpus: int, tp: int) -> str:
    """The model is mounted read-only, not baked into the image; NCCL needs host IPC (or a big /dev/shm)."""
    devices = "all" if gpus <= 1 and tp <= 1 else f'"device={",".join(str(i) for i in range(max(gpus, tp)))}"'
    shm = ["--ipc=host"] if tp > 1 else ["--shm-size=2g"]
    args = shlex.split(vllm_args)[2:]  # drop "vllm serve"
    if not model_dir.startswith("/"):  # a hub id, not a directory: no mount (a bare name would be a named volume)
        return shlex.join(["docker", "run", "--rm", "--gpus", devices, *shm, "-p", "8000:8000",
                           "-v", "hf-cache:/root/.cache/huggingface", "vllm/vllm-openai:latest",
                           "--model", model_dir, *args[1:]])
    target = f"/models/{name}"
    return shlex.join(["docker", "run", "--rm", "--gpus", devices, *shm, "-p", "8000:8000",
                       "-v", f"{model_dir}:{target}:ro", "-e", "HF_HUB_OFFLINE=1",
                       "vllm/vllm-openai:latest", "--model", target, *args[1:]])


def llama_cpp_cmd(a: Arch, name: str, context: int, seqs: int, usable: float) -> str:
    """llama-server on one GPU: as many layers offloaded (-ngl) as fit beside the f16 KV cache."""
    kv = a.kv_bytes_per_token("bf16") * context * max(seqs, 1)
    per_layer = a.weights_bytes("int4") / max(a.layers, 1)
    ngl = a.layers if a.weights_bytes("int4") + kv <= usable else max(0, int((usable - kv - 0.5 * GIB) // per_layer))
    return shlex.join(["llama-server", "-m", f"{name}-Q4_K_M.gguf", "-c", str(context * max(seqs, 1)),
                       "--parallel", str(max(seqs, 1)), "-ngl", str(ngl), "--host", "0.0.0.0", "--port", "8080"])
