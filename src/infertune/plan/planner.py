"""`infertune plan`: will this model fit on this GPU under vLLM, how much KV cache and concurrency does
it get, how fast can it be at best, and the commands to run it. Embedding models (models/kind.py decides,
as for tune and serve) are planned by plan/embed.py instead: no KV cache, weights + batch activations.

vLLM's budget (v1 gpu_worker, memory profiling), per GPU:
  kv_cache = total x gpu_memory_utilization - weights - activation peak of the profile run - non-torch
The activation peak is modelled as the MLP intermediate of `max_num_batched_tokens` tokens (or the
sampler's fp32 logits for `max_num_seqs` sequences, whichever is larger); non-torch memory (CUDA context,
cuBLAS workspaces, NCCL buffers with TP) is a constant. Blocks = kv_cache // (block_size x KV bytes per
token); max concurrency = blocks / ceil(max_model_len / block_size), as vLLM logs it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from infertune.errors import InfertuneError
from infertune.hardware.gpu_specs import find_gpu
from infertune.plan.arch import DTYPE_BYTES, Arch, arch_from_config, load_config
from infertune.plan.embed import EmbedPlan, plan_embedding
from infertune.plan.notes import moe_notes, vllm_notes
from infertune.plan.quantized import QUANTIZED, QuantPlan, calibration_count
from infertune.plan.roofline import rooflines
from infertune.quantize.llm_checkpoint_step import CheckpointStep

GIB = 2**30
DTYPES = ("bf16", "fp8", "int8", "int4")
CALIBRATE_LM = ("--calibrated-from calibrates an embedding model's plan; a causal LM's plan has no measured bound to "
                "scale yet: plan without it")


class PlanConfig(BaseModel):
    model: str
    gpu: str | None = Field(None, description="GPU name; default: the local GPU (doctor's probes)")
    gpus: int | None = Field(None, ge=1, description="GPUs available (per node); default 1")
    tensor_parallel_size: int | None = Field(None, ge=1, description="use this TP instead of the smallest that fits")
    pipeline_parallel_size: int = Field(1, ge=1, description="pipeline stages (nodes, the way vLLM splits over nodes)")
    workload: Path | None = None
    context: int | None = Field(None, gt=0, description="max_model_len: prompt + output tokens")
    concurrency: int | None = Field(None, gt=0)
    dtype: Literal["auto", "bf16", "fp16", "fp8", "int8", "int4"] = "auto"
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM's default (0.92 in newer docs)")
    gpu_memory_gib: float | None = Field(None, gt=0, description="override the spec table, e.g. nvidia-smi's figure")
    max_num_batched_tokens: int | None = Field(None, gt=0)
    max_num_seqs: int | None = Field(None, gt=0)
    kv_cache_memory_bytes: int | None = Field(None, gt=0, description="KV memory known (e.g. from vLLM's log)")
    block_size: int = Field(16, gt=0)
    non_torch_gib: float = Field(0.5, ge=0, description="CUDA context + library workspaces per GPU")
    nccl_gib: float = Field(0.5, ge=0, description="extra non-torch memory per GPU when TP > 1")
    fixed_shapes: bool = False
    task: Literal["embed", "generate"] | None = Field(None, description="override the model-kind decision")
    interconnect: Literal["auto", "nvlink", "pcie"] = Field(
        "auto", description="between the GPUs of a node (nvidia-smi topo -m: NV# = nvlink); auto: SXM/HGX parts nvlink")
    calibrated_from: Path | None = Field(None, description="a tune of this model on this GPU (its --out directory or "
                                         "results.json): scale the throughput bound by the efficiency it measured")


class Engine(BaseModel):
    name: str
    reasons: list[str]


class PlanResult(BaseModel):
    model: str
    gpu: dict[str, Any]
    context: int
    concurrency: int
    dtype: str
    kv_cache_dtype: str
    params: int
    params_active: int
    weights_bytes: int
    weights_bytes_by_dtype: dict[str, int]
    # KV-cache figures: None for an embedder (one forward pass per input, nothing cached)
    kv_bytes_per_token: int | None  # whole model, per token (per GPU: kv_bytes_per_token_per_gpu)
    kv_bytes_per_token_per_gpu: int | None
    kv_cache_bytes: int | None  # per GPU, at the chosen TP
    kv_blocks: int | None
    kv_tokens: int | None
    max_concurrency: float | None
    fits: bool
    tensor_parallel_size: int | None
    tensor_parallel_for_concurrency: int | None
    valid_tp_sizes: list[int]
    pipeline_parallel_size: int = 1
    max_num_seqs: int = 1
    memory_budget: dict[str, float]
    decode_step_ms_roofline: float | None
    roofline: dict[str, dict[str, float | None]]
    engine: Engine
    commands: dict[str, str]
    workload: dict[str, Any] = {}
    notes: list[str] = []
    task: Literal["embed", "generate"] = "generate"  # models/kind.py's decision
    embedding: EmbedPlan | None = None  # memory, throughput bound and engines of an embedder (plan/embed.py)
    # the llm-compressor step that makes the checkpoint commands["vllm"] serves (None: bf16/fp16, or a
    # directory that is a quantized checkpoint already), every quantized scheme read for this GPU (candidate with
    # kernel, step and `vllm serve`, or dropped with the reason) and where vLLM keeps an FP8 KV cache here
    checkpoint: CheckpointStep | None = None
    quant_candidates: list[dict[str, Any]] = []
    kv_cache_fp8: dict[str, Any] | None = None


MAX_SEQS_DEFAULT = 256  # vLLM's max_num_seqs default for the OpenAI server on most GPUs


def model_location(model: str) -> tuple[str, str]:
    """(name, directory to mount): a config.json path names its directory; an alias resolves to its files;
    anything else (a hub id) is passed through as it is."""
    mp = Path(str(model)).expanduser()
    if not mp.exists():
        try:
            from infertune.models.resolve import resolve_model

            return str(model), str(Path(resolve_model(str(model)).path).resolve())  # an alias names itself
        except Exception:  # noqa: BLE001 - a hub id: vLLM downloads it
            return str(model).rstrip("/").rsplit("/", 1)[-1] or "model", str(model)
    d = mp.parent if mp.suffix == ".json" else mp
    d = d.resolve()
    return (d.name if mp.name == "config.json" else mp.name.removesuffix(".json")) or "model", str(d)


def _pct(xs: list[int], q: float) -> int:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def valid_tp(a: Arch, limit: int) -> list[int]:
    """vLLM needs heads % TP == 0, and KV heads to split evenly or replicate evenly."""
    out = []
    for tp in (1, 2, 4, 8, 16):
        if tp > limit or a.heads % tp:
            continue
        if not a.mla and not (a.kv_heads % tp == 0 or tp % a.kv_heads == 0):
            continue
        out.append(tp)
    return out


def budget(a: Arch, cfg: PlanConfig, total: float, dtype: str, tp: int, batched: int, seqs: int) -> dict[str, float]:
    weights = a.weights_bytes(dtype) / (tp * cfg.pipeline_parallel_size)  # PP: each stage holds its layers
    act = max(a.activation_bytes_per_token(dtype, tp) * batched, seqs * a.vocab * 4.0)
    non_torch = (cfg.non_torch_gib + (cfg.nccl_gib if tp > 1 else 0)) * GIB
    requested = total * cfg.gpu_memory_utilization
    kv = cfg.kv_cache_memory_bytes if cfg.kv_cache_memory_bytes else requested - weights - act - non_torch
    return {"total": total, "requested": requested, "weights": weights, "activation_peak": act,
            "non_torch": non_torch, "kv_cache": kv}


def kv_fit(a: Arch, cfg: PlanConfig, kv_bytes: float, tp: int, context: int) -> tuple[int, int, float]:
    pp = cfg.pipeline_parallel_size
    per_tok = (a.kv_bytes_per_token("fp8" if cfg.kv_cache_dtype == "fp8" else "bf16", tp)
               * math.ceil(a.layers / pp) // a.layers)
    page = cfg.block_size * per_tok  # all layers of one block
    blocks = int(kv_bytes // page) if kv_bytes > 0 and page else 0
    return blocks, per_tok, blocks / math.ceil(context / cfg.block_size) if blocks else 0.0


def _engine(a: Arch, g: dict, dtype: str, conc: int, fits: bool, cfg: PlanConfig) -> Engine:
    r: list[str] = []
    edge = g.get("kind") == "laptop" or g["memory_gib"] <= 12
    if edge:
        r.append(f"{g['name']} has {g['memory_gib']} GiB: edge-class, so 4-bit weights (AWQ/GPTQ, or GGUF with "
                 "llama.cpp) leave room for the KV cache")
    if dtype in ("int4", "fp8") and not edge:
        r.append(f"bf16 weights do not fit with room for the KV cache, so {dtype} weights")
    if conc > 1 or not cfg.fixed_shapes:
        r.append(f"decoder with dynamic batching ({conc} concurrent sequences): continuous batching and paged KV "
                 "cache (vLLM; TensorRT-LLM is the NVIDIA-only alternative with an engine build per GPU and shape)")
        name = "vllm"
    else:
        r.append("single stream with fixed shapes: TensorRT-LLM's compiled engine minimises per-token latency")
        name = "tensorrt-llm"
    if not fits:
        r.append("does not fit even at the largest tensor-parallel size tried: use more GPUs or smaller weights")
    return Engine(name=name if fits or not edge else "llama.cpp", reasons=r)


def _kind(cfg: PlanConfig):
    from infertune.models.kind import model_kind
    from infertune.models.resolve import resolve_model

    return model_kind(resolve_model(cfg.model), cfg.task)


def _embed_result(cfg: PlanConfig, a: Arch, kind, raw: dict, g: dict, total: float, wl: dict,
                  notes: list[str], lengths: list[int]) -> PlanResult:
    e = plan_embedding(cfg, a, kind, raw, g, total, wl, notes, model_location(cfg.model), lengths)
    if cfg.calibrated_from:
        from infertune.plan.calibrate import apply, calibration

        apply(e["embedding"], calibration(cfg.calibrated_from, cfg.model, a, g), e["dtype"], notes)
    return PlanResult(
        model=str(cfg.model), gpu=g, context=e["context"], concurrency=cfg.concurrency or 1, dtype=e["dtype"],
        kv_cache_dtype="none", params=a.params(), params_active=a.params(active=True),
        weights_bytes=a.weights_bytes(e["dtype"]), weights_bytes_by_dtype={d: a.weights_bytes(d) for d in DTYPES},
        kv_bytes_per_token=None, kv_bytes_per_token_per_gpu=None, kv_cache_bytes=None, kv_blocks=None,
        kv_tokens=None, max_concurrency=None, fits=e["fits"], tensor_parallel_size=1 if e["fits"] else None,
        tensor_parallel_for_concurrency=None, valid_tp_sizes=[1], memory_budget=e["memory_budget"],
        decode_step_ms_roofline=None, roofline={}, engine=Engine(name=e["engine_name"], reasons=e["engine_reasons"]),
        commands=e["commands"], workload=wl, notes=notes, task="embed", embedding=e["embedding"],
    )


def plan(cfg: PlanConfig) -> PlanResult:
    """Size a vLLM deployment of `cfg.model` on `cfg.gpu` (config-only: no weights, no torch)."""
    from infertune.plan.commands import vllm_cmd, write_commands

    raw = load_config(cfg.model)
    a = arch_from_config(raw)
    kind = _kind(cfg)
    notes: list[str] = []
    cfg, g = _gpu(cfg, notes)
    total = (cfg.gpu_memory_gib or g["memory_gib"]) * GIB
    wl, prompts, outs, how = _workload(cfg, notes)
    if kind.task == "embed":
        return _embed_result(cfg, a, kind, raw, g, total, wl, notes, prompts)
    if cfg.calibrated_from:
        raise InfertuneError(CALIBRATE_LM)
    context = _context(cfg, a, wl, prompts, outs, notes)
    conc = cfg.concurrency or 1
    big = total >= 70 * GIB and "a100" not in g["name"].lower()  # vLLM's serve defaults (EngineArgs.get_batch_defaults)
    batched = cfg.max_num_batched_tokens or (8192 if big else 2048)
    seqs = cfg.max_num_seqs or max(conc, 1)
    limit, tps = _tp_sizes(cfg, a, g, notes)
    qp = QuantPlan(g, raw)
    by_dtype = {d: a.weights_bytes(d) for d in DTYPES}

    def first_fit(dtype: str, need_conc: float) -> int | None:
        for tp in tps:
            b = budget(a, cfg, total, dtype, tp, batched, seqs)
            blocks, _, c = kv_fit(a, cfg, b["kv_cache"], tp, context)
            if blocks and c >= need_conc and (a.encoder or blocks * cfg.block_size >= context):
                return tp
        return None

    dtype = _dtype(cfg, qp, g, limit, first_fit, notes)
    notes += qp.check(dtype) + qp.kv_notes(cfg.kv_cache_dtype)
    tp = first_fit(dtype, 1.0)
    tp_conc = first_fit(dtype, float(conc))
    use_tp = tp or tps[-1]
    b = budget(a, cfg, total, dtype, use_tp, batched, seqs)
    blocks, per_tok_gpu, max_conc = kv_fit(a, cfg, b["kv_cache"], use_tp, context)
    kv_dt = "fp8" if cfg.kv_cache_dtype == "fp8" else "bf16"
    bw = g["bandwidth_gbs"] * 1e9
    roof = rooflines(a, g, DTYPES, context, conc, use_tp, kv_dt, wl.get("prompt_p50") or context)
    notes += vllm_notes(a, g, cfg, use_tp, batched, seqs)
    engine = _engine(a, g, dtype, conc, tp is not None, cfg)
    name, model_dir = model_location(cfg.model)
    max_seqs = _max_seqs(cfg, conc, max_conc, context, notes)
    pp = cfg.pipeline_parallel_size

    def serve_cmd(path: str | None, d: str) -> str:
        return vllm_cmd(model_dir, max_model_len=context, max_num_seqs=max_seqs, util=cfg.gpu_memory_utilization,
                        tp=use_tp, kv_dtype=kv_dt, dtype=d, pp=pp, served_path=path, act_dtype=qp.act_dtype)

    step_kw = {"workload": str(cfg.workload) if cfg.workload else None,
               "n_calibration": calibration_count(prompts, how), "max_seq_length": context}
    served, step, qnotes = qp.serving(dtype, model_dir, name, **step_kw)
    notes += qnotes
    if a.experts:
        notes += moe_notes(a, use_tp * pp)
    commands = write_commands(a, name, model_dir, served, step, serve_cmd(served, dtype), dtype=dtype, tp=use_tp,
                              pp=pp, max_seqs=max_seqs, max_input=min(wl.get("prompt_p100", context), context),
                              context=context, batched=batched, half=qp.half, llama_cpp=engine.name == "llama.cpp",
                              usable=total * cfg.gpu_memory_utilization, notes=notes)
    return PlanResult(
        model=str(cfg.model), gpu=g, context=context, concurrency=conc, dtype=dtype, kv_cache_dtype=kv_dt,
        params=a.params(), params_active=a.params(active=True), weights_bytes=by_dtype[dtype] if dtype in by_dtype
        else a.weights_bytes(dtype), weights_bytes_by_dtype=by_dtype,
        kv_bytes_per_token=a.kv_bytes_per_token(kv_dt), kv_bytes_per_token_per_gpu=per_tok_gpu,
        kv_cache_bytes=int(max(b["kv_cache"], 0)), kv_blocks=blocks, kv_tokens=blocks * cfg.block_size,
        max_concurrency=round(max_conc, 4), fits=tp is not None, tensor_parallel_size=tp,
        tensor_parallel_for_concurrency=tp_conc, valid_tp_sizes=tps, memory_budget=b, pipeline_parallel_size=pp,
        max_num_seqs=max_seqs,
        decode_step_ms_roofline=roof.get(dtype, {}).get("decode_step_ms_bs1") if dtype in roof else
        (a.decode_read_bytes(dtype) / use_tp + per_tok_gpu * context) / bw * 1e3,
        roofline=roof, engine=engine, commands=commands, workload=wl, notes=notes, checkpoint=step,
        quant_candidates=qp.candidates({d: first_fit(d, 1.0) is not None for d in QUANTIZED}, serve_cmd, model_dir,
                                       name, **step_kw),
        kv_cache_fp8=qp.kv.model_dump(),
    )


def _gpu(cfg: PlanConfig, notes: list[str]) -> tuple[PlanConfig, dict[str, Any]]:
    """The GPU planned for: --gpu, else this host's (whose memory then overrides the spec table's)."""
    gpu_name = cfg.gpu
    if gpu_name is None:
        from infertune.hardware.gpus import local_gpu

        gpu_name, local_mib = local_gpu()
        notes.append(f"no --gpu: planning for this host's {gpu_name}")
        if local_mib and not cfg.gpu_memory_gib:
            cfg = cfg.model_copy(update={"gpu_memory_gib": round(local_mib / 1024, 2)})
    return cfg, find_gpu(gpu_name)


def _workload(cfg: PlanConfig, notes: list[str]) -> tuple[dict[str, Any], list[int], list[int], str | None]:
    """--workload's summary (percentiles of its lengths), prompt and output lengths and how they were counted."""
    if not cfg.workload:
        return {}, [], [], None
    from infertune.workloads.lengths import request_lengths

    prompts, outs, how = request_lengths(cfg.workload, tokenizer_dir=model_location(cfg.model)[1])
    lens = [p + o for p, o in zip(prompts, outs, strict=False)] if outs else prompts
    wl = {"source": str(cfg.workload), "requests": len(prompts), "lengths": how,
          **{f"prompt_p{q}": _pct(prompts, q) for q in (0, 50, 90, 99, 100)},
          "total_p99": _pct(lens, 99), "total_max": max(lens)}
    notes.append(f"workload {cfg.workload}: {len(prompts)} requests, lengths {how}")
    return wl, prompts, outs, how


def _context(cfg: PlanConfig, a: Arch, wl: dict[str, Any], prompts: list[int], outs: list[int],
             notes: list[str]) -> int:
    """max_model_len: --context, else the workload's longest request (rounded up to 256), else 8192, within the
    model's positions unless --context asks for more."""
    context = cfg.context or (int(math.ceil(wl["total_max"] / 256) * 256) if wl else min(a.max_positions or 8192, 8192))
    if not cfg.context and not wl:
        notes.append(f"no --context or --workload: planning for {context} tokens per sequence")
    if a.max_positions and context > a.max_positions and cfg.context:
        notes.append(f"--context {context} exceeds the model's max_position_embeddings {a.max_positions}: vLLM refuses "
                     "it unless the model has rope scaling for it (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    elif a.max_positions and context > a.max_positions:
        lens = [p + o for p, o in zip(prompts, outs, strict=False)] if outs else prompts
        over = sum(1 for n in lens if n > a.max_positions)
        notes.append(f"context capped at the model's {a.max_positions} positions (max_position_embeddings, not "
                     f"{context}): " + (f"{over} of {len(lens)} workload requests need more and would be truncated "
                                        "or refused" if lens else "longer sequences would be refused"))
        context = a.max_positions
    return context


def _tp_sizes(cfg: PlanConfig, a: Arch, g: dict[str, Any], notes: list[str]) -> tuple[int, list[int]]:
    """(GPUs usable, the tensor-parallel sizes to try): --tensor-parallel-size, else every valid one up to --gpus."""
    limit = cfg.gpus or 1
    if g.get("kind") == "laptop" and limit > 1:
        notes.append(f"{g['name']} is a laptop part: one GPU, whatever --gpus says")
        limit = 1
    tps = valid_tp(a, limit) or [1]
    if cfg.tensor_parallel_size:
        if cfg.tensor_parallel_size not in valid_tp(a, 16):
            from infertune.errors import InfertuneError

            raise InfertuneError(f"tensor parallel {cfg.tensor_parallel_size} does not divide the model's "
                                 f"{a.heads} attention heads / {a.kv_heads} KV heads; valid: {valid_tp(a, 16)}")
        tps = [cfg.tensor_parallel_size]
    if not cfg.gpus and not cfg.tensor_parallel_size and len(valid_tp(a, 8)) > 1:
        notes.append("planning for 1 GPU (pass --gpus N to let tensor parallel use more)")
    return limit, tps


def _dtype(cfg: PlanConfig, qp: QuantPlan, g: dict[str, Any], limit: int, first_fit, notes: list[str]) -> str:
    """The weights' dtype: a quantized checkpoint's own, --dtype, else the 16-bit one this GPU has, or the first
    quantized scheme vLLM serves here that fits (`first_fit(dtype, 1.0)`: the smallest TP that holds one sequence)."""
    half = qp.half
    if cfg.dtype == "bf16" and half == "fp16" and not qp.pre:
        from infertune.errors import InfertuneError

        raise InfertuneError(f"--dtype bf16 on {g['name']}: compute capability {g['cc']} has no bf16 (it needs "
                             "8.0) and vLLM refuses it; use --dtype fp16 (the same memory) or auto")
    dtype = cfg.dtype if cfg.dtype != "auto" else (half if cfg.kv_cache_memory_bytes else None)
    if qp.pre:  # a quantized checkpoint already: its weights are what they are
        if cfg.dtype not in ("auto", qp.pre[0]):
            notes.append(f"--dtype {cfg.dtype} ignored: the directory holds {qp.pre[0]} weights ({qp.pre[1]})")
        dtype = qp.pre[0]
    if dtype is None:
        options = [half] + qp.auto_order()  # quantized fallbacks: only schemes vLLM serves on this GPU
        dtype = next((d for d in options if first_fit(d, 1.0)), half)
        if dtype != half:
            notes.append(f"{half} weights do not fit on {limit} x {g['name']}; planning with {dtype}")
        if half == "fp16":
            notes.append(f"fp16, not bf16: {g['name']} (compute capability {g['cc']}) has no bf16")
    return dtype


def _max_seqs(cfg: PlanConfig, conc: int, max_conc: float, context: int, notes: list[str]) -> int:
    """vLLM's --max-num-seqs: given, else --concurrency, else what the KV cache holds (at most vLLM's default)."""
    if cfg.max_num_seqs:
        return cfg.max_num_seqs
    if cfg.concurrency:
        if max_conc < conc:
            notes.append(f"--max-num-seqs {conc} (from --concurrency) exceeds the {max_conc:.2f} full-length sequences "
                         "the KV cache holds: vLLM will queue or preempt when sequences run long")
        return cfg.concurrency
    max_seqs = max(1, min(MAX_SEQS_DEFAULT, int(max_conc)))
    notes.append(f"--max-num-seqs {max_seqs} from the KV capacity ({max_conc:.2f} sequences of {context} tokens"
                 f"{f', capped at vLLM default {MAX_SEQS_DEFAULT}' if int(max_conc) > MAX_SEQS_DEFAULT else ''}); "
                 "shorter requests leave room for more: pass --concurrency to set it")
    return max_seqs


__all__ = ["PlanConfig", "PlanResult", "plan", "DTYPE_BYTES"]
