"""Exact commands for the planned deployment: `vllm serve`, `docker run` and llama.cpp's `llama-server`
(TensorRT's: plan/tensorrt.py; the llm-compressor step that makes a quantized checkpoint:
quantize/llm_checkpoint_step.py), and the table of them a plan prints."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

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


def vllm_image(model_dir: str) -> str:
    """The vllm/vllm-openai image `docker run` names, never `:latest`: the vLLM an artifact was tuned with (the
    manifest's `versions.vllm` beside ARTIFACT/model), else the newest release in data/cuda_compat.toml (deploy
    picks the one the nodes' driver runs: `infertune deploy --cuda X.Y`)."""
    import json

    from infertune.doctor.compat import vllm_images
    from infertune.engines.causal_lm.versions import image_for

    for d in (Path(model_dir), Path(model_dir).parent):
        try:
            tuned = json.loads((d / "manifest.json").read_text()).get("versions", {}).get("vllm")
        except (OSError, ValueError, AttributeError):
            continue
        if tuned:
            return image_for(tuned)
    return vllm_images()[0]["image"]


def docker_cmd(model_dir: str, name: str, vllm_args: str, gpus: int, tp: int, image: str | None = None) -> str:
    """The model is mounted read-only, not baked into the image; NCCL needs host IPC (or a big /dev/shm)."""
    image = image or vllm_image(model_dir)
    devices = "all" if gpus <= 1 and tp <= 1 else f'"device={",".join(str(i) for i in range(max(gpus, tp)))}"'
    shm = ["--ipc=host"] if tp > 1 else ["--shm-size=2g"]
    args = shlex.split(vllm_args)[2:]  # drop "vllm serve"
    if not model_dir.startswith("/"):  # a hub id, not a directory: no mount (a bare name would be a named volume)
        return shlex.join(["docker", "run", "--rm", "--gpus", devices, *shm, "-p", "8000:8000",
                           "-v", "hf-cache:/root/.cache/huggingface", image,
                           "--model", model_dir, *args[1:]])
    target = f"/models/{name}"
    return shlex.join(["docker", "run", "--rm", "--gpus", devices, *shm, "-p", "8000:8000",
                       "-v", f"{model_dir}:{target}:ro", "-e", "HF_HUB_OFFLINE=1",
                       image, "--model", target, *args[1:]])


def llama_cpp_cmd(a: Arch, name: str, context: int, seqs: int, usable: float) -> str:
    """llama-server on one GPU: as many layers offloaded (-ngl) as fit beside the f16 KV cache."""
    kv = a.kv_bytes_per_token("bf16") * context * max(seqs, 1)
    per_layer = a.weights_bytes("int4") / max(a.layers, 1)
    ngl = a.layers if a.weights_bytes("int4") + kv <= usable else max(0, int((usable - kv - 0.5 * GIB) // per_layer))
    return shlex.join(["llama-server", "-m", f"{name}-Q4_K_M.gguf", "-c", str(context * max(seqs, 1)),
                       "--parallel", str(max(seqs, 1)), "-ngl", str(ngl), "--host", "0.0.0.0", "--port", "8080"])


def write_commands(a: Arch, name: str, model_dir: str, served: str | None, step: Any, vcmd: str, *, dtype: str,
                   tp: int, pp: int, max_seqs: int, max_input: int, context: int, batched: int, half: str,
                   llama_cpp: bool, usable: float, notes: list[str]) -> dict[str, str]:
    """Name -> command for a causal LM's plan: the llm-compressor step (when the weights need one), `vllm serve`
    (`vcmd`), TensorRT-LLM's steps, `docker run` and, for an edge GPU, llama.cpp's; `notes` gets how to use them."""
    from infertune.plan.tensorrt import one_line, trtllm_steps

    trt = trtllm_steps(model_dir, a.model_type, dtype, tp=tp, pp=pp, max_batch=max_seqs, max_input=max_input,
                       max_seq=context, max_tokens=max(batched, max_input), half=half)
    commands = {**({"llm-compressor": step.command} if step else {}), "vllm": vcmd,
                **{k: one_line(v) for k, v in trt.items()},
                "docker": docker_cmd(served or model_dir, Path(served).name if served else name, vcmd, tp, tp)}
    notes.append("TensorRT-LLM (where it is installed; `infertune export MODEL` writes these steps as a script): "
                 "$TRTLLM is a TensorRT-LLM checkout; the engine is built for this GPU, "
                 f"{max_seqs} sequences, prompts up to {max_input} and sequences up to {context} tokens")
    if llama_cpp:
        commands["llama.cpp"] = llama_cpp_cmd(a, name, context, max_seqs, usable)
        ngl = int(commands["llama.cpp"].split(" -ngl ")[1].split()[0])
        notes.append(f"llama.cpp: {ngl} of {a.layers} layers on the GPU (-ngl), the rest on the CPU; 4-bit GGUF "
                     f"weights {a.weights_bytes('int4') / GIB:.2f} GiB")
        notes.append("llama.cpp needs a GGUF: python convert_hf_to_gguf.py MODEL_DIR --outtype f16, then "
                     f"llama-quantize {name}-f16.gguf {name}-Q4_K_M.gguf Q4_K_M")
    return commands
