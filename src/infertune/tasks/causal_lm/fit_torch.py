"""Fit before start for `tune --lm-engine torch` on a GPU: each in-process engine's memory need (weights in its
dtype or quantized format, the static KV cache for its largest batch, the longest timed prompt's activation peak,
the CUDA context and workspaces: plan's arithmetic, tasks/causal_lm/fit.py's Fit) against what the driver says is
free now, before any worker loads a weight.

- A candidate that cannot fit is skipped with the sentence and the figures.
- A quantized candidate whose unquantized model would not fit is loaded layer by layer: each decoder layer moves to
  the GPU and is quantized there before the next, so the peak is the quantized model plus one 16-bit layer; lm_head
  stays 16-bit (quantizing it takes an fp32 copy of it).
- When the 16-bit reference cannot fit, it runs on the CPU (fp32 where the host RAM holds it: lossless against
  16-bit weights), the weights of every candidate are made on the CPU (random weights are then the same draw on
  both devices) and results.json's `lm.accuracy_reference` says so. Its speed is a CPU figure: the winner's ratio to
  it is named as such."""

from __future__ import annotations

from dataclasses import replace

from infertune.tasks.causal_lm.fit import Fit, free_bytes

QUANT_WEIGHTS = {"torchao-int8-wo": "int8", "torchao-int8-dyn": "int8", "torchao-int4": "int4", "torchao-fp8": "fp8"}


def weights_dtype(cand) -> str:
    return QUANT_WEIGHTS.get(cand.quant or "") or ("fp32" if cand.precision == "fp32" else "bf16")


def check(arch, cand, free: float, why: str, *, batch: int, max_len: int, prompt_tokens: int,
          dtype: str | None = None, head_quantized: bool = True) -> Fit:
    """The Fit of one in-process engine (`dtype`: its weights' format, else the candidate's own; `head_quantized`:
    False where lm_head stays 16-bit, as a layer-by-layer load keeps it)."""
    from infertune.plan.arch import DTYPE_BYTES
    from infertune.plan.planner import PlanConfig, budget

    dtype = dtype or weights_dtype(cand)
    b = budget(arch, PlanConfig(model="-"), 0.0, dtype, 1, prompt_tokens, batch)
    weights = b["weights"]
    # plan keeps lm_head 16-bit (vLLM's checkpoints do); torchao quantizes it: tied, a copy beside the 16-bit table
    if dtype in QUANT_WEIGHTS.values() and head_quantized:
        head, q = arch.vocab * arch.hidden, DTYPE_BYTES[dtype]
        weights += head * q if arch.tied else -head * (2.0 - q)
    kv = arch.kv_bytes_per_token("fp32" if cand.precision == "fp32" else "bf16") * batch * max_len
    return Fit(candidate=cand.id, dtype=dtype, weights=weights, kv=kv, activation=b["activation_peak"],
               margin=b["non_torch"], free=free, free_why=why, concurrency=batch, context=max_len,
               engine="this engine")


def cpu_reference(arch, cand, mem_available: float | None = None):
    """The reference moved to the CPU: fp32 where the host RAM holds it, else its 16-bit type."""
    from infertune.engines.causal_lm.reference import _mem_available_bytes

    mem = _mem_available_bytes() if mem_available is None else mem_available
    precision = "fp32" if arch.weights_bytes("fp32") * 1.2 < mem else "bf16"
    return cand.model_copy(update={"device": "cpu", "precision": precision})


def screen(task, options: list, caps, free_gib: float | None | str = "measure",
           mem_available: float | None = None) -> list:
    """CausalLMTask.options' fit check on a GPU: options that cannot fit skipped, the reference moved to the CPU
    when it cannot fit, quantized loads streamed when the 16-bit model would not fit. Sets task.ref_cand,
    task.stream and results.json's `lm.fit` / `lm.accuracy_reference`."""
    from infertune.plan.arch import arch_from_config, load_config

    if caps.device != "cuda" or caps.gpu is None or not caps.gpu.memory_gb:
        return options
    if free_gib == "measure":
        from infertune.hardware.gpus import free_memory_gib

        free_gib = free_memory_gib(caps.gpu.index)
    free, why = free_bytes(caps, None, free_gib)
    arch = arch_from_config(load_config(task.spec.path))
    p = task.plan
    shape = {"batch": max(p["batches"]), "max_len": p["max_len"],
             "prompt_tokens": max(len(x) for x in p["ttft"].values())}
    out, fits = [], []
    for o in options:
        c = o.candidate
        if c.backend == "vllm" or o.skip:
            out.append(o)
            continue
        f = check(arch, c, free, why, **shape)
        if c.quant and not check(arch, c, free, why, dtype="bf16", **shape).fits:
            # the 16-bit model would not fit on the way to quantizing it: loaded layer by layer, lm_head 16-bit
            f = check(arch, c, free, why, head_quantized=False, **shape)
            if f.fits:
                task.stream.add(c.id)
        fits.append(f)
        if not f.fits and o.role == "reference":
            moved = cpu_reference(arch, c, mem_available)
            task.ref_cand = moved
            task.result.reference = moved.id
            task.result.lm["accuracy_reference"] = {
                "kind": f"cpu-{moved.precision}", "candidate": moved.id,
                "why_not_gpu": f"{c.id} {f.sentence()}",
                "note": "the reference's speed is a CPU figure; every candidate's weights are made on the CPU"}
            task.console.print(f"  the reference {c.id} does not fit this GPU ({f.sentence()}); it runs on the "
                               f"CPU as {moved.id}", highlight=False)
            o = replace(o, candidate=moved)
        elif not f.fits:
            o = replace(o, skip=f.sentence())
        out.append(o)
    task.result.lm["fit"] = [f.as_dict() for f in fits]
    return out
