"""`infertune export` for a causal LM: the TensorRT-LLM steps as a script, lengths from the workload.

A generator's engine is not built from ONNX (trtexec has no decode loop or paged KV cache): TensorRT-LLM converts
the Hugging Face checkpoint itself. So nothing is exported or checked here; tensorrt-llm.sh holds the checkpoint
step, `trtllm-build` with the workload's lengths and `trtllm-serve`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError

DEFAULT_BATCH = 8  # trtllm-build's own default for --max_batch_size


def export_generator(cfg: Any, ref: Any, wl: Any, out: Path, t0: float):
    from infertune.export.config import ExportResult
    from infertune.models.kind import config_file
    from infertune.plan.arch import arch_from_config, load_config
    from infertune.plan.tensorrt import script, trtllm_steps
    from infertune.workloads.chat import load_chat_workload

    if ref.format == "gguf":
        raise InfertuneError(f"{cfg.model} is a GGUF file: TensorRT-LLM converts Hugging Face checkpoints; pass the "
                             "model's Hugging Face directory")
    a = arch_from_config(load_config(config_file(ref)))
    requests, source = load_chat_workload(cfg.workload)
    notes = []
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(ref.path))
        prompts = [len(tok(r.render(tok))["input_ids"]) for r in requests]
        notes.append("prompt lengths from the model's tokenizer (chat template applied)")
    except Exception:  # noqa: BLE001 - config-only directory: no tokenizer to count with
        prompts = [max(1, len(r.render(None) if r.prompt else " ".join(c for _, c in r.messages)) // 4)
                   for r in requests]
        notes.append(f"no tokenizer in {ref.path}: prompt lengths estimated at 4 characters per token "
                     "(under-counts CJK text, about 1 token per character)")
    cap = a.max_positions or 1 << 30
    max_input = min(max(prompts), cap)
    max_seq = min(max(p + r.max_tokens for p, r in zip(prompts, requests, strict=True)), cap)
    over = sum(1 for p, r in zip(prompts, requests, strict=True) if p + r.max_tokens > cap)
    if over:
        notes.append(f"{over} requests need more than the model's {cap} positions: lengths capped there")
    steps = trtllm_steps(str(Path(ref.path).resolve()), a.model_type, "bf16", tp=1, pp=1, max_batch=DEFAULT_BATCH,
                         max_input=max_input, max_seq=max_seq, max_tokens=max(8192, max_input))
    out.mkdir(parents=True, exist_ok=True)
    header = (f"TensorRT-LLM engine for {cfg.model}, written by `infertune export` (run where TensorRT-LLM is\n"
              f"installed; TRTLLM=<your TensorRT-LLM checkout>). Lengths from {len(requests)} requests of {source}:\n"
              f"prompts up to {max_input} tokens, prompt + output up to {max_seq}. "
              f"`infertune plan {cfg.model} --gpu G`\n"
              "sizes the batch and tensor parallel for a GPU.")
    path = out / "tensorrt-llm.sh"
    path.write_text(script(list(steps.items()), header))
    path.chmod(0o755)
    notes.append("a causal LM: no ONNX written and nothing checked; TensorRT-LLM converts the checkpoint itself")
    result = ExportResult(
        model=cfg.model, source=ref.format, to=cfg.to, out=str(out), path=None,
        files=sorted([path.name, "report.json"]), opset=None, inputs=[], outputs=[], dynamic_axes={}, pooling=None,
        buckets=[], min_cosine=None, min_cosine_required=cfg.min_cosine, passed=True, workload=source,
        truncated_inputs=over, tensorrt_script=str(path), notes=notes, wall_s=round(time.perf_counter() - t0, 1))
    (out / "report.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2))
    return result
