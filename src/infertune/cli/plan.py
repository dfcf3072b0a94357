"""`infertune plan`: thin shell over infertune.plan.planner.plan()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)


def plan_cmd(
    model: Annotated[str, typer.Argument(help="model directory or config.json (weights not needed)")],
    gpu: Annotated[str | None, typer.Option(
        help="GPU name, e.g. H200, H100, H100-PCIe, L4, RTX-4090 or what "
             "nvidia-smi prints (default: this host's GPU)")] = None,
    gpus: Annotated[int | None, typer.Option(
        help="GPUs available for tensor parallel (default 1; a laptop part is always 1)")] = None,
    workload: Annotated[Path | None, typer.Option(
        help="JSONL of requests (prompt_tokens/output_tokens or text)")] = None,
    context: Annotated[int | None, typer.Option(help="max_model_len: prompt + output tokens per sequence")] = None,
    concurrency: Annotated[int | None, typer.Option(help="concurrent sequences to serve")] = None,
    dtype: Annotated[str, typer.Option(help="weights: auto|bf16|fp16|fp8|int8|int4")] = "auto",
    kv_cache_dtype: Annotated[str, typer.Option(help="auto (16-bit) or fp8")] = "auto",
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM's memory fraction")] = 0.9,
    gpu_memory_gib: Annotated[float | None, typer.Option(help="override the GPU's memory (GiB)")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(
        help="vLLM's; sizes the profile-run activations")] = None,
    kv_cache_memory_gib: Annotated[float | None, typer.Option(help="KV memory if known (e.g. from a vLLM log)")] = None,
    fixed_shapes: Annotated[bool, typer.Option(help="inputs have fixed shapes (favours TensorRT)")] = False,
    interconnect: Annotated[str, typer.Option(
        help="auto|nvlink|pcie between the node's GPUs (nvidia-smi topo -m)")] = "auto",
    task: Annotated[str | None, typer.Option(
        help="embed|generate: what the model is for (default: decided "
             "from its files, as tune and serve decide)")] = None,
    calibrated_from: Annotated[Path | None, typer.Option(
        help="a tune of this model on this GPU (--out directory or results.json): use the share of the bound "
             "it measured instead of the spec bound")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON on stdout")] = False,
) -> None:
    """Weights per dtype, KV capacity at vLLM's memory fraction, max concurrency, smallest TP that fits,
    prefill/decode rooflines, an engine recommendation and the exact vllm / trtexec / docker commands.
    For an embedding model: weights + batch activations (no KV cache), a prefill throughput bound and the
    infertune serve / vLLM pooling runner / TensorRT commands.

    The plan goes to stdout (`infertune plan ... > plan.txt`); with --json, JSON goes there instead."""
    from infertune.console import console
    from infertune.errors import InfertuneError
    from infertune.plan.planner import PlanConfig, plan

    if task not in (None, "embed", "generate"):
        raise InfertuneError(f"unknown --task {task!r}; choose embed or generate")
    r = plan(PlanConfig(task=task,
        model=model, gpu=gpu, gpus=gpus, workload=workload, context=context, concurrency=concurrency, dtype=dtype,
        kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization, gpu_memory_gib=gpu_memory_gib,
        max_num_batched_tokens=max_num_batched_tokens, fixed_shapes=fixed_shapes, interconnect=interconnect,
        kv_cache_memory_bytes=int(kv_cache_memory_gib * 2**30) if kv_cache_memory_gib else None,
        calibrated_from=calibrated_from,
    ))
    con = console(stderr=as_json)
    (print_embedding if r.embedding is not None else print_generation)(con, r)
    if as_json:
        typer.echo(json.dumps(r.model_dump(mode="json"), indent=2))


def print_generation(con, r) -> None:
    """A causal LM's plan: weights, the memory budget down to the KV cache, concurrency, TP, rooflines, the engine,
    its commands and the quantized checkpoints."""
    from rich.markup import escape

    g = 2**30
    con.print(f"[bold]{r.model}[/] on {r.gpu['name']} ({r.gpu['memory_gib']} GiB, {r.gpu['bandwidth_gbs']} GB/s): "
              f"{r.params / 1e9:.2f} B params ({r.params_active / 1e9:.2f} B active)", highlight=False)
    con.print("weights: " + ", ".join(f"{d} {b / g:.2f} GiB" for d, b in r.weights_bytes_by_dtype.items()),
              highlight=False)
    b = r.memory_budget
    con.print(f"per GPU at TP={r.tensor_parallel_size or r.valid_tp_sizes[-1]}, {r.dtype}: "
              f"{b['requested'] / g:.2f} GiB budget - weights {b['weights'] / g:.2f} - activations "
              f"{b['activation_peak'] / g:.2f} - non-torch {b['non_torch'] / g:.2f} = KV "
              f"{r.kv_cache_bytes / g:.2f} GiB", highlight=False)
    con.print(f"KV: {r.kv_bytes_per_token / 1024:.1f} KiB/token ({r.kv_bytes_per_token_per_gpu / 1024:.1f} per GPU), "
              f"{r.kv_blocks} blocks = {r.kv_tokens} tokens; max concurrency at {r.context} tokens: "
              f"{r.max_concurrency:.2f}x",
              highlight=False)
    con.print(f"fits: {r.fits}; --max-num-seqs {r.max_num_seqs}; smallest TP: {r.tensor_parallel_size}; "
              f"TP for {r.concurrency} sequences: {r.tensor_parallel_for_concurrency}; "
              f"valid TP sizes: {r.valid_tp_sizes}", highlight=False)
    for d, x in r.roofline.items():
        pre = f"{x['prefill_ms']:.1f} ms" if x["prefill_ms"] is not None else "n/a (no published peak)"
        con.print(f"  roofline {d:>5}: decode step {x['decode_step_ms_bs1']:.3f} ms (bs=1), prefill of "
                  f"{x['prefill_tokens']} tokens {pre}  [bounds, not measurements]", highlight=False)
    con.print(f"engine: [bold]{r.engine.name}[/] - " + "; ".join(r.engine.reasons), highlight=False)
    for k, v in r.commands.items():
        con.print(f"[dim]{k}:[/] {escape(v)}", highlight=False)
    for q in r.quant_candidates:  # each scheme's step and `vllm serve` are in --json (quant_candidates)
        if q["status"] == "candidate":
            made = f"; its step writes {q['checkpoint']['output']}" if q.get("checkpoint") else ""
            con.print(f"[dim]checkpoint {escape(q['label'])}:[/] candidate on {escape(q['kernel'])}"
                      f"{'' if q['fits'] else ' (weights do not fit this plan)'}{escape(made)}", highlight=False)
        else:
            con.print(f"[dim]checkpoint {escape(q['label'])}:[/] dropped: {escape(q['reason'])}", highlight=False)
    for n in r.notes:
        con.print(f"[dim]note: {escape(n)}[/]", highlight=False)


def print_embedding(con, r) -> None:
    """An embedder's plan: memory without a KV cache, the prefill throughput bound, three engines."""
    e, g, b = r.embedding, 2**30, r.memory_budget
    con.print(f"[bold]{r.model}[/] ({e.arch} embedder: {e.why}) on {r.gpu['name']} ({r.gpu['memory_gib']} GiB, "
              f"{r.gpu['bandwidth_gbs']} GB/s): {r.params / 1e6:.1f} M params", highlight=False)
    con.print("weights: " + ", ".join(f"{d} {x / g:.3f} GiB" for d, x in r.weights_bytes_by_dtype.items()),
              highlight=False)
    con.print(f"memory at {r.dtype}: weights {b['weights'] / g:.3f} + activations for {e.batch_tokens} batched tokens "
              f"{b['activation_peak'] / g:.3f} + non-torch {b['non_torch'] / g:.2f} = "
              f"{e.memory_need_bytes / g:.2f} GiB of {e.memory_available_bytes / g:.2f} GiB usable", highlight=False)
    con.print(f"fits on 1 GPU: {'yes' if r.fits else 'no'}; inputs up to {r.context} tokens; no cache: one forward "
              "pass per input, no tokens generated", highlight=False)
    comp = (f"{e.batch_ms_compute:.3f} ms compute" if e.batch_ms_compute is not None else
            f"no published tensor peak for {r.gpu['name']}, so compute is not bounded here")
    con.print(f"throughput bound ({r.dtype}, {e.batch_tokens}-token batches of {e.input_len}-token inputs): "
              f"{e.tokens_per_s:,.0f} tokens/s = {e.items_per_s:,.0f} items/s, {e.bound}-bound ({comp} vs "
              f"{e.batch_ms_memory:.3f} ms memory per batch; {e.flops_per_token / 1e6:.1f} MFLOP/token)  "
              "[a bound, not a measurement]", highlight=False)
    if e.efficiency is not None:
        con.print(f"calibrated from {e.calibrated_from}: measured {_share(e.efficiency)} of the roofline bound on this "
                  f"host ({r.gpu['name']}): {e.calibrated_tokens_per_s:,.0f} tokens/s = "
                  f"{e.calibrated_items_per_s:,.0f} items/s expected", highlight=False, markup=False)
    con.print(f"engine: [bold]{r.engine.name}[/] - {r.engine.reasons[0]}", highlight=False)
    for o in e.engines:
        con.print(f"[dim]{o.name}{' (chosen)' if o.chosen else ''}:[/] {o.command}", highlight=False, soft_wrap=True)
        con.print(f"[dim]  why: {o.why}[/]", highlight=False)
    for n in r.notes:
        con.print(f"[dim]note: {n}[/]", highlight=False)


def _share(x: float) -> str:
    """41%, 2.3% (under 10%: one decimal)."""
    return f"{x * 100:.0f}%" if x >= 0.1 else f"{x * 100:.1f}%"
