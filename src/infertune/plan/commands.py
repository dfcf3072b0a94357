"""Exact commands for the planned deployment: `vllm serve` and `docker run` (TensorRT's: export/tensorrt.py)."""

from __future__ import annotations

import shlex

QUANT_FLAG = {"fp8": "fp8", "int4": "awq_marlin", "int8": None, "bf16": None, "fp16": None}


def vllm_cmd(model: str, *, max_model_len: int, max_num_seqs: int, util: float, tp: int, kv_dtype: str,
             dtype: str, served_path: str | None = None, pp: int = 1) -> str:
    parts = ["vllm", "serve", served_path or model, "--max-model-len", str(max_model_len),
             "--max-num-seqs", str(max_num_seqs), "--gpu-memory-utilization", f"{util:g}",
             "--tensor-parallel-size", str(tp), "--kv-cache-dtype", "fp8" if kv_dtype == "fp8" else "auto"]
    if pp > 1:
        parts += ["--pipeline-parallel-size", str(pp)]
    q = QUANT_FLAG.get(dtype)
    if q:
        parts += ["--quantization", q]
    elif dtype in ("bf16", "fp16"):
        parts += ["--dtype", "bfloat16" if dtype == "bf16" else "float16"]
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
