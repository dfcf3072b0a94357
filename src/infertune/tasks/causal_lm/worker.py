"""The process that holds one causal-LM candidate: load, quantize, build its engine, then answer the
parent's commands (score, greedy, measure, save) until told to stop. Started by infertune.tuning.worker.Worker
with job["serve"] = "infertune.tasks.causal_lm.worker:serve"."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def apply_quant(model, quant: str | None, device: str):
    if not quant:
        return model
    if quant == "int8-wo":
        from infertune.quantize.int8_weight_only import int8_weight_only

        return int8_weight_only(model)
    if quant == "torch.ao-dynamic":
        from infertune.quantize.torch_ao import linear_names, quantize_dynamic_int8

        return quantize_dynamic_int8(model, linear_names(model))
    if quant == "torchao-int4":
        import torchao.quantization as q

        from infertune.quantize.torchao import int4_packing

        q.quantize_(model, q.Int4WeightOnlyConfig(group_size=128, int4_packing_format=int4_packing()))
        return model
    from infertune.quantize.torchao import apply

    return apply(model, quant)


def stream_quantized(model, quant: str, device: str):
    """`model` (on the CPU) to `device` one decoder layer at a time, each quantized there before the next moves:
    the peak is the quantized model plus one 16-bit layer, not the whole 16-bit model. Then the rest (embeddings,
    norms, lm_head) moves as it is: quantizing lm_head takes an fp32 copy of it (594 MiB for Qwen3-0.6B's 151,936 x
    1,024), which is what ran a 1.5 GiB card out of memory (docs/measurements/2026-12-06-h200-lm-capped-memory)."""
    import torch

    layers = next((m for n, m in model.named_modules() if n.endswith("layers") and isinstance(m, torch.nn.ModuleList)),
                  None)
    if layers is None:  # an architecture without a layer list: the whole model, as usual
        return apply_quant(model.to(device), quant, device)
    for layer in layers:
        apply_quant(layer.to(device), quant, device)
        torch.cuda.empty_cache()
    return model.to(device)


def _tensor_bytes(t) -> int:
    inner = getattr(t, "__tensor_flatten__", None)
    if inner is not None and type(t).__name__ not in ("Tensor", "Parameter"):
        names, _ = t.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def decode_bytes(model) -> int:
    """Bytes of weights one decode step reads: every Linear / norm parameter (quantized or not), but
    of an input embedding table only the looked-up rows (counted as 0), unless it is tied to lm_head."""
    import torch

    total, seen = 0, set()
    for mod in model.modules():
        if isinstance(mod, torch.nn.Embedding):
            continue
        if hasattr(mod, "_packed_params") and hasattr(mod, "weight") and callable(mod.weight):
            w = mod.weight()  # torch.ao dynamic int8 Linear
            total += w.numel() * w.element_size() + (mod.bias().numel() * 4 if mod.bias() is not None else 0)
            continue
        for p in list(mod.parameters(recurse=False)) + list(mod.buffers(recurse=False)):
            if id(p) not in seen and not (p.dtype == torch.float32 and p.dim() == 1 and "Rotary" in type(mod).__name__):
                seen.add(id(p))
                total += _tensor_bytes(p)
    return total


def build(job: dict[str, Any]):
    import torch

    from infertune.engines.causal_lm.engine import GenerateEngine, StaticEngine
    from infertune.engines.causal_lm.models import LMSpec, load_model
    from infertune.tasks.causal_lm.candidates import LMCandidate

    spec = LMSpec(**job["spec"])
    cand = LMCandidate.model_validate(job["candidate"])
    device = job["device"]
    stream = bool(job.get("stream")) and bool(cand.quant) and device == "cuda"
    made_on = "cpu" if job.get("cpu_init") or stream else device
    model = load_model(spec, cand.precision, made_on, seed=job.get("seed", 0))
    if stream:
        model = stream_quantized(model, cand.quant, device)
    else:
        model = apply_quant(model.to(device), cand.quant, device)
    if cand.backend == "hf-generate":
        engine = GenerateEngine(model, device, job["max_len"])
    else:
        mode = {"static": "eager", "static-compile": "compile", "cuda-graph": "cudagraph",
                "cuda-graph-compile": "compile-graph"}[cand.backend]
        if mode == "compile-graph":
            _eager_attention(model)
        engine = StaticEngine(model, device, job["max_len"], mode)
    executed = {"backend": cand.backend, "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
                "quant": cand.quant, "decode_weight_bytes": decode_bytes(model),
                "static_cache_len": job["max_len"] if cand.backend != "hf-generate" else None,
                "threads": torch.get_num_threads(), "random_weights": spec.random_weights, "device": device,
                "loaded": ("layer by layer, each quantized on the GPU; lm_head kept 16-bit" if stream
                           else f"whole, made on {made_on}"),
                "linear_types": sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__})}
    return spec, cand, model, engine, executed


def _eager_attention(model) -> None:
    """Batch-1 decode over a static cache: the plain matmul-softmax-matmul attention, which inductor fuses,
    beat SDPA (cuDNN and memory-efficient kernels) on the H200: 1.400 vs 1.679 ms per step for the
    Qwen3-0.6B shape (docs/measurements/2026-11-29-h200-decode)."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    else:
        model.config._attn_implementation = "eager"


def _measure(engine, args: dict[str, Any]) -> dict[str, Any]:
    ttft = {label: [engine.ttft(ids) for _ in range(args["reps"])] for label, ids in args["ttft"].items()}
    tpot = {str(b): engine.decode_times(b, args["ctx"], args["steps"]) for b in args["batches"]}
    return {"ttft": ttft, "tpot": tpot}


def save(model, spec, cand, path: Path) -> dict[str, Any]:
    """An HF directory vLLM loads: config + safetensors in the candidate's float dtype + tokenizer.
    Quantized candidates are saved as their float weights (the recipe is recorded in the manifest)."""
    from infertune.engines.causal_lm.models import load_model, load_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    plain = load_model(spec, cand.precision, "cpu") if cand.quant else model.to("cpu")
    plain.config.use_cache = True
    plain.save_pretrained(path / "model")
    load_tokenizer(spec).save_pretrained(path / "model")
    size = sum(f.stat().st_size for f in (path / "model").glob("*.safetensors"))
    return {"weights": "model", "dtype": cand.precision, "bytes": size}


def serve(conn, job: dict[str, Any]) -> None:
    from infertune.engines.worker_setup import setup
    from infertune.tuning.worker import answer_commands, peak_rss_mb

    setup(job.get("threads"))
    t0 = time.perf_counter()
    spec, cand, model, engine, executed = build(job)

    def greedy(args: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        return {"tokens": [engine.greedy(ids, args["n"]) for ids in args["prompts"]], "wall_s": time.perf_counter() - t}

    def measure(args: dict[str, Any]) -> dict[str, Any]:
        out = _measure(engine, args)
        out["peak_rss_mb"] = peak_rss_mb()
        if job["device"] == "cuda":
            import torch

            out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
        return out

    conn.send(("ok", {"prepare_s": time.perf_counter() - t0, "executed": executed}))
    answer_commands(conn, {"score": lambda args: engine.score(args["seqs"], args.get("ref")), "greedy": greedy,
                           "measure": measure, "save": lambda args: save(model, spec, cand, Path(args["path"]))})
