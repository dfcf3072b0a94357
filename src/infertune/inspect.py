"""`infertune inspect`: where a model's parameters, bytes and FLOPs go, layer by layer, and what a token of KV
cache costs.

The model is built on torch's meta device from its config (no weights read, no memory used: inspect_meta.py)
and run under torch.utils.flop_counter.FlopCounterMode for one prefill of `seq_len` tokens and, for a causal
LM, one decode step against a `seq_len`-token cache, so per-layer FLOPs come from the real module code.
Parameter dtypes come from the safetensors headers when weights exist, else from the config. The analytic
count of infertune.plan.arch (what `plan` uses, torch-free) is reported next to it as a cross-check, and
for an MoE model it is the headline whenever the two differ by more than 10%: on meta tensors the router's
picks mean nothing, so the counter does not see k experts per token. When transformers has no code for the
config (a model that needs trust_remote_code, a family newer than the install), everything is the analytic
count and a note says so.

An embedding model (models.kind decides, as tune and serve do) is counted as it runs: the body without
lm_head, one forward pass per input and no KV cache, at the workload's token lengths, with the pooling its
sentence-transformers files name.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from infertune.errors import InfertuneError

FLOP_DISAGREEMENT = 0.10  # counter vs analytic: beyond this the figures are flagged, not silently both printed


class InspectConfig(BaseModel):
    model: str
    seq_len: int = Field(512, gt=0)
    sensitivity: bool = False
    results: Path | None = None  # a tune results.json to read `sensitivity` from
    sensitivity_texts: int = Field(32, gt=0)
    workload: Path | None = None  # an embedder's inputs for FLOPs per item (default: the built-in sample)
    gpu: str | None = None  # name a GPU to say whether each layer is memory- or compute-bound on it


class InspectResult(BaseModel):
    model: str
    model_type: str
    architecture: str
    seq_len: int
    params: int
    params_by_module_type: dict[str, int]
    bytes_by_module_type: dict[str, int]
    params_by_dtype: dict[str, int]
    bytes_total: int
    dtype_source: str
    flops_per_token: dict[str, float]  # prefill / decode: the headline (flops_source says counter or analytic)
    flops_per_token_by_layer: dict[str, dict[str, float]]
    attention_flops_share: dict[str, float]
    flops_per_token_analytic: dict[str, float]
    kv_bytes_per_token: int
    kv_layout: str
    head_dim: int
    sensitivity: list[dict[str, Any]] = []
    sensitivity_source: str | None = None
    notes: list[str] = []
    wall_s: float
    # the keys above are read by other tools; new ones are only added below
    task: str = "generate"  # embed | generate: models.kind's decision
    pooling: dict[str, Any] | None = None  # an embedder's {"pooling", "normalize", "source"}
    count_method: str = "meta"  # meta: torch's FLOP counter on the meta device | analytic: from config.json alone
    flops_source: dict[str, str] = {}  # per phase: counter | analytic
    flops_per_token_counter: dict[str, float] = {}  # what the counter saw (empty when nothing was counted)
    flops_per_token_by_layer_counter: dict[str, dict[str, float]] = {}
    bytes_by_layer: dict[str, dict[str, float]] = {}  # bytes one step at batch 1 moves through the layer
    arithmetic_intensity_by_layer: dict[str, dict[str, float]] = {}  # FLOP/byte of that step
    gpu: str | None = None
    ridge_flop_per_byte: float | None = None  # the GPU's peak FLOP/s over its bandwidth
    bound_by_layer: dict[str, dict[str, str]] = {}  # memory | compute on `gpu`
    workload: dict[str, Any] | None = None  # an embedder's inputs: lengths and FLOPs per item


def flop_notes(counted: dict[str, float], analytic: dict[str, float], experts: int = 0, active: int = 0) -> list[str]:
    """A note per phase where torch's counter and the analytic count differ by more than 10%."""
    out = []
    for ph, c in counted.items():
        an = analytic.get(ph)
        if not an or not c or abs(c - an) / an <= FLOP_DISAGREEMENT:
            continue
        why = (f"MoE ({active} of {experts} experts per token): the counter sees whatever experts the router "
               "picks on meta tensors (no real weights) and however the implementation dispatches them; the "
               f"analytic figure counts exactly {active} routed (+ shared) experts per token, so prefer it and "
               "treat the counter as unverified for this model" if experts else
               "an operation the analytic model does not cover (or counts differently) dominates; check the "
               "per-layer table")
        out.append(f"{ph}: FLOP counter {c / 1e9:.2f} vs analytic {an / 1e9:.2f} GFLOP/token "
                   f"({(c - an) / an:+.0%}); {why}")
    return out


def _sensitivity(cfg: InspectConfig, ref) -> tuple[list[dict[str, Any]], str]:
    if cfg.results:
        try:
            data = json.loads(Path(cfg.results).read_text())
        except (OSError, ValueError) as e:
            raise InfertuneError(f"cannot read tune results {cfg.results}: {e}") from e
        sens = data.get("sensitivity") or []
        if not sens:
            raise InfertuneError(f"{cfg.results} has no `sensitivity` list; run `infertune tune` (it measures it)")
        return sens, str(cfg.results)
    if ref is None or ref.format not in ("sentence-transformers", "hf"):
        raise InfertuneError("--sensitivity needs weights: pass --results runs/<run>/results.json from "
                             "`infertune tune`, or an embedding model directory (sensitivity is then measured here "
                             "on the sample workload)")
    from infertune.models.embedding import embedding_spec
    from infertune.tasks.embedding.mixed import search
    from infertune.workloads.texts import load_workload

    texts = load_workload(None).items[: cfg.sensitivity_texts]
    res = search(embedding_spec(ref).to_dict(), texts, min_cosine_mean=0.0, min_cosine_min=-1.0, max_keep=0)
    return res["sensitivity"], f"measured: int8 dynamic quantization of one Linear at a time, {len(texts)} sample texts"


def _locate(model: str):
    """(ModelRef, config.json path, directory whose safetensors hold the weights or None)."""
    from infertune.models.resolve import resolve_model

    ref = resolve_model(model)
    if ref.format not in ("sentence-transformers", "hf", "config"):
        raise InfertuneError(f"inspect reads Hugging Face configs; {model} is {ref.format}")
    named = Path(model).expanduser()
    if named.is_file() and named.suffix == ".json":
        return ref, named, None
    return ref, ref.path / "config.json", ref.path


def _embedder(ref, raw: dict[str, Any]) -> dict[str, Any] | None:
    """How an embedding model pools, where that was read, its longest input and its tokenizer; None for a causal LM."""
    from infertune.models.embedding import default_pooling, embedding_spec
    from infertune.models.kind import model_kind

    kind = model_kind(ref)
    if kind.task != "embed":
        return None
    if ref.format == "config":  # embedding_spec would draw random weights for this; the pooling needs none
        pool, norm = default_pooling(kind.arch)
        return {"pooling": pool, "normalize": norm, "why": kind.why, "tokenizer_dir": str(ref.path), "config": None,
                "arch": kind.arch,
                "source": f"the default for a {kind.label} (no sentence-transformers files)",
                "max_length": int(raw.get("max_position_embeddings") or 512)}
    spec = embedding_spec(ref)
    source = f"the default for a {kind.label} (no sentence-transformers files)"
    if ref.format == "sentence-transformers":
        mods = json.loads((ref.path / "modules.json").read_text())
        pooler = next((m.get("path", "") for m in mods if str(m.get("type", "")).endswith("Pooling")), None)
        source = f"{pooler}/config.json" if pooler is not None else "modules.json (no Pooling module: mean)"
    return {"pooling": spec.pooling, "normalize": spec.normalize, "why": kind.why, "source": source, "arch": kind.arch,
            "tokenizer_dir": spec.path, "config": Path(spec.path) / "config.json", "max_length": spec.max_length}


def _first(e: Exception) -> str:
    """An exception's first sentence: transformers' explain the fix at length after it."""
    return (str(e).strip().splitlines() or [""])[0].split(". ")[0][:200]


def _counted(cfg_path: Path, a, n: int, weights_dir: Path | None, dtype: str) -> dict[str, Any] | str:
    """The meta-device count, or the one-line reason transformers could not build or run the model."""
    from infertune.inspect_meta import count, meta_model, st_dtypes, tally

    try:
        model = meta_model(cfg_path, body=a.encoder)
    except (ValueError, KeyError, ImportError, OSError) as e:
        return f"transformers cannot build {a.model_type or 'this model'} here ({type(e).__name__}: {_first(e)})"
    import torch

    st = st_dtypes(weights_dir) if weights_dir else {}
    t = tally(model, st, dtype)
    ids = torch.zeros(1, n, dtype=torch.long, device="meta")
    # a body (encoder, or an embedder's decoder) runs with its defaults: a decoder body told use_cache=False
    # takes a mask path that calls .item(), which meta tensors refuse; the cache it builds costs no FLOPs
    kw: dict[str, Any] = {} if a.encoder else {"use_cache": True, "logits_to_keep": 1}
    try:
        total, by_layer, attn, out = count(model, ids, **kw)
        flops, share = {"prefill": total / n}, {"prefill": attn / total if total else 0.0}
        layers = {k: {"prefill": v / n} for k, v in by_layer.items()}
        if not a.encoder:
            dec, dec_layers, dec_attn, _ = count(model, ids[:, :1], past_key_values=out.past_key_values,
                                                 use_cache=True, logits_to_keep=1)
            flops["decode"], share["decode"] = dec, dec_attn / dec if dec else 0.0
            for k, v in dec_layers.items():
                layers.setdefault(k, {})["decode"] = v
    except (RuntimeError, NotImplementedError, TypeError) as e:
        return f"transformers' {type(model).__name__} does not run on the meta device ({type(e).__name__}: {_first(e)})"
    return {"model": model, "tally": t, "st": bool(st), "flops": flops, "layers": layers, "share": share}


def _analytic_only(a, raw: dict[str, Any], alias: str, bpp: int) -> dict[str, Any]:
    from infertune.plan.layers import params_by_part

    parts = params_by_part(a)
    return {"architecture": (raw.get("architectures") or [a.model_type])[0], "by_type": parts,
            "bytes_by_type": {k: v * bpp for k, v in parts.items()}, "by_dtype": {alias: sum(parts.values())}}


def _headline(c: dict[str, Any] | None, a, n: int) -> tuple[dict, dict, dict, dict, dict]:
    """(flops, flops by layer, attention share, source, analytic totals) per phase: the counter's figures, or the
    analytic ones where nothing was counted or an MoE model's count is off by more than 10%."""
    from infertune.plan.layers import flops_by_layer

    phases = ("prefill",) if a.encoder else ("prefill", "decode")
    flops, layers, share, source, analytic = {}, {}, {}, {}, {}
    for ph in phases:
        ctx = n if ph == "prefill" else n + 1
        an = a.flops_per_token(ctx, ph)
        analytic[ph] = an["total"]
        got = c["flops"].get(ph) if c else None
        off = got is None or (a.experts and abs(got - an["total"]) / an["total"] > FLOP_DISAGREEMENT)
        source[ph] = "analytic" if off else "counter"
        if off:
            flops[ph], share[ph] = an["total"], an["attention"] / an["total"]
            per_layer = flops_by_layer(a, ctx, ph)
        else:
            flops[ph], share[ph] = got, c["share"][ph]
            per_layer = {k: v[ph] for k, v in c["layers"].items() if ph in v}
        for k, v in per_layer.items():
            layers.setdefault(k, {})[ph] = v
    return flops, dict(sorted(layers.items())), share, source, analytic


def _layer_costs(a, layers: dict, weights: dict, n: int, act_b: int, gpu: str | None, dtype: str, notes: list[str]):
    from infertune.plan.layers import intensity, step_bytes

    kv_layer = a.kv_bytes_per_token() / a.layers * act_b / 2 if not a.encoder else 0.0  # in the model's dtype
    by, ai = {}, {}
    for k, phases in layers.items():
        if k not in weights:  # the embedding gather: no matmul, nothing to weigh against its bytes
            continue
        by[k] = {ph: step_bytes(a, k, tuple(weights[k]), ph, n, act_b, kv_layer) for ph in phases}
        ai[k] = {ph: intensity(f, by[k][ph], ph, n) for ph, f in phases.items()}
    ridge, bound, name = None, {}, None
    if gpu:
        from infertune.hardware.gpu_specs import find_gpu, peak_tflops

        g = find_gpu(gpu)
        name = g["name"]
        prec = "fp16" if dtype == "float16" or not g.get("bf16_tflops") else "bf16"
        peak = peak_tflops(g, prec)
        if peak:
            ridge = peak * 1e12 / (g["bandwidth_gbs"] * 1e9)
            bound = {k: {ph: "memory" if v < ridge else "compute" for ph, v in p.items()} for k, p in ai.items()}
            notes.append(f"bound on {name}: a layer under the ridge point ({prec} peak {peak:g} TFLOP/s over "
                         f"{g['bandwidth_gbs']:g} GB/s = {ridge:.0f} FLOP/byte) is memory-bound"
                         + ("; bytes are at the stored float32, twice what 16-bit weights move" if act_b == 4 else ""))
        else:
            notes.append(f"{name} has no published {prec} tensor peak in data/gpus.toml: no bound per layer")
    return by, ai, ridge, bound, name


def _per_item(cfg: InspectConfig, emb: dict[str, Any], prefill: float, attn_share: float, n: int) -> dict[str, Any]:
    """Mean prefill FLOPs per input at the workload's token lengths (capped at the model's limit): the linear part
    grows with the length, attention with its square (per token at n: attn_share x prefill)."""
    from infertune.workloads.lengths import count_tokens
    from infertune.workloads.texts import load_workload

    wl = load_workload(cfg.workload)
    counts, how = count_tokens(wl.items, emb["tokenizer_dir"])
    cap = emb["max_length"]
    lengths = [min(c, cap) for c in counts]
    attn = attn_share * prefill
    per_item = [(prefill - attn) * L + attn * L * L / n for L in lengths]
    return {"source": wl.source, "items": len(lengths), "lengths": how, "max_length": cap,
            "truncated": sum(1 for c in counts if c > cap), "mean_tokens": sum(lengths) / len(lengths),
            "max_tokens": max(lengths), "flops_per_item_mean": sum(per_item) / len(per_item),
            "flops_per_token": sum(per_item) / sum(lengths)}


def inspect_model(cfg: InspectConfig | str) -> InspectResult:
    """Parameters, bytes, FLOPs per token (prefill and decode, by layer, with bytes and arithmetic intensity per
    layer), KV bytes per token; an embedder's pooling and FLOPs per input at the workload's lengths."""
    if isinstance(cfg, str):
        cfg = InspectConfig(model=cfg)
    t0 = time.perf_counter()
    from infertune.inspect_meta import ST_BYTES
    from infertune.plan.arch import arch_from_config, load_config
    from infertune.plan.layers import weight_bytes_by_layer

    ref, cfg_path, weights_dir = _locate(cfg.model)
    raw = load_config(cfg_path)
    emb = _embedder(ref, raw)
    if emb and emb["config"] is not None and emb["config"] != cfg_path:  # a sentence-transformers 0_Transformer/
        cfg_path, weights_dir, raw = emb["config"], emb["config"].parent, load_config(emb["config"])
    a = arch_from_config(raw)
    if emb:
        a = dataclasses.replace(a, encoder=True)  # an embedder runs its body once per input: no lm_head, no cache
    cfg_dtype = str(raw.get("torch_dtype") or raw.get("dtype") or "float32").replace("torch.", "")
    alias = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}.get(cfg_dtype, "F32")
    n = cfg.seq_len
    c = _counted(cfg_path, a, n, weights_dir, alias)
    notes: list[str] = []
    if isinstance(c, str):
        notes.append(f"{c}: parameters, bytes and FLOPs are the analytic count from config.json ("
                     + (f"MoE: {a.experts_per_tok} of {a.experts} routed + {a.shared_experts} shared experts "
                        "per token; " if a.experts else "") + ("MLA projections; " if a.mla else "")
                     + "attention over the full square), by part instead of by module type")
        c, parts = None, _analytic_only(a, raw, alias, ST_BYTES[alias])
        weights = weight_bytes_by_layer(a, ST_BYTES[alias])
    else:
        t = c["tally"]
        parts = {"architecture": type(c["model"]).__name__, "by_type": dict(t.by_type),
                 "bytes_by_type": dict(t.bytes_by_type), "by_dtype": dict(t.by_dtype)}
        weights = dict(t.layer_weights)
        notes += t.tied
    flops, layers, share, source, analytic = _headline(c, a, n)
    if c:
        notes += flop_notes(c["flops"], analytic, a.experts, a.experts_per_tok)
        notes += [f"{ph}: the headline and per-layer FLOPs are the analytic count (MoE, counter off by more than "
                  f"{FLOP_DISAGREEMENT:.0%})" for ph, s in source.items() if s == "analytic"]
    if cfg.workload and not emb:
        notes.append("--workload is read for embedding models (FLOPs per input); a causal LM's figures are per token "
                     "at --seq-len")
    act_b = 4 if alias == "F32" else 2
    by, ai, ridge, bound, gpu = _layer_costs(a, layers, weights, n, act_b, cfg.gpu, cfg_dtype, notes)
    layout = ("none (embedding model: one forward pass per input, nothing cached)" if emb else
              "MLA latent" if a.mla else "MHA" if a.kv_heads == a.heads else "MQA" if a.kv_heads == 1 else "GQA")
    sens, src = _sensitivity(cfg, ref) if cfg.sensitivity else ([], None)
    return InspectResult(
        model=cfg.model, model_type=a.model_type, architecture=parts["architecture"], seq_len=n,
        params=sum(parts["by_type"].values()), params_by_module_type=parts["by_type"],
        bytes_by_module_type=parts["bytes_by_type"], params_by_dtype=parts["by_dtype"],
        bytes_total=sum(parts["bytes_by_type"].values()),
        dtype_source="safetensors headers" if c and c["st"] else f"config ({cfg_dtype})", flops_per_token=flops,
        flops_per_token_by_layer=layers, attention_flops_share=share, flops_per_token_analytic=analytic,
        kv_bytes_per_token=a.kv_bytes_per_token(), kv_layout=layout, head_dim=a.head_dim, sensitivity=sens,
        sensitivity_source=src, notes=notes, wall_s=round(time.perf_counter() - t0, 2),
        task="embed" if emb else "generate",
        pooling={k: emb[k] for k in ("pooling", "normalize", "source", "why")} if emb else None,
        count_method="meta" if c else "analytic", flops_source=source,
        flops_per_token_counter=c["flops"] if c else {}, flops_per_token_by_layer_counter=c["layers"] if c else {},
        bytes_by_layer=by, arithmetic_intensity_by_layer=ai, gpu=gpu, ridge_flop_per_byte=ridge, bound_by_layer=bound,
        workload=_per_item(cfg, emb, flops["prefill"], share["prefill"], n) if emb else None,
    )
