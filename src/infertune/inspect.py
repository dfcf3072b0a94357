"""`infertune inspect`: where a model's parameters, bytes and FLOPs go, and what a token of KV cache costs.

The model is built on torch's meta device from its config (no weights read, no memory used) and run
under torch.utils.flop_counter.FlopCounterMode for one prefill of `seq_len` tokens and one decode step
against a `seq_len`-token cache, so per-layer FLOPs come from the real module code. Parameter dtypes
come from the safetensors headers when weights exist, else from the config. The analytic count of
infertune.plan.arch (what `plan` uses, torch-free) is reported next to it as a cross-check.
"""

from __future__ import annotations

import json
import re
import struct
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from infertune.errors import InfertuneError

ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "F8_E4M3": 1, "F8_E5M2": 1}
ATTN_OPS = ("scaled_dot_product", "bmm", "flash_attention", "efficient_attention")


class InspectConfig(BaseModel):
    model: str
    seq_len: int = Field(512, gt=0)
    sensitivity: bool = False
    results: Path | None = None  # a tune results.json to read `sensitivity` from
    sensitivity_texts: int = Field(32, gt=0)


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
    flops_per_token: dict[str, float]  # prefill / decode (meta-tensor count)
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


FLOP_DISAGREEMENT = 0.10  # counter vs analytic: beyond this the figures are flagged, not silently both printed


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


def _st_dtypes(d: Path) -> dict[str, str]:
    """Parameter name -> safetensors dtype, from file headers only (8-byte length + JSON)."""
    out: dict[str, str] = {}
    for f in sorted(d.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            head = json.loads(fh.read(n))
        out.update({k: v["dtype"] for k, v in head.items() if k != "__metadata__"})
    return out


def _fast_transformers_import() -> None:
    """transformers' generation module imports scikit-learn (3+ s) only for assisted decoding's ROC
    threshold; inspect never generates, so hide sklearn from that one import when it has not happened yet."""
    import sys

    if "transformers.generation.candidate_generator" in sys.modules:
        return
    import transformers.utils as tu

    real = tu.is_sklearn_available
    tu.is_sklearn_available = lambda: False
    try:
        import transformers.generation.candidate_generator  # noqa: F401
    except ImportError:
        pass
    finally:
        tu.is_sklearn_available = real


def _meta_model(cfg_path: Path, encoder: bool):
    import torch

    _fast_transformers_import()
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    hf = AutoConfig.from_pretrained(str(cfg_path))
    cls = AutoModel if encoder else AutoModelForCausalLM
    with torch.device("meta"):
        try:
            return cls.from_config(hf, attn_implementation="sdpa"), hf
        except (ValueError, ImportError):
            return cls.from_config(hf), hf


def _count(model, ids, **kw) -> tuple[float, dict[str, float], float, Any]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    fc = FlopCounterMode(display=False)
    with fc, torch.no_grad():
        out = model(input_ids=ids, **kw)
    counts = fc.get_flop_counts()
    total = float(fc.get_total_flops())
    attn = float(sum(v for op, v in counts.get("Global", {}).items() if any(a in str(op) for a in ATTN_OPS)))
    by_layer: dict[str, float] = {}
    for name, ops in counts.items():
        m = re.search(r"\.layers?\.(\d+)$", name) or re.search(r"\.(embeddings|lm_head|pooler)$", name)
        if m:
            key = f"layer{int(m.group(1)):02d}" if m.group(1).isdigit() else m.group(1)
            by_layer[key] = float(sum(ops.values()))
    return total, by_layer, attn, out


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
        raise InfertuneError("--sensitivity needs weights: pass --results runs/<run>/results.json from `infertune tune`, "
                             "or an embedding model directory (sensitivity is then measured here on the sample workload)")
    from infertune.models.embedding import embedding_spec
    from infertune.quantize.mixed import search
    from infertune.workload import load_workload

    texts = load_workload(None).items[: cfg.sensitivity_texts]
    res = search(embedding_spec(ref).to_dict(), texts, min_cosine_mean=0.0, min_cosine_min=-1.0, max_keep=0)
    return res["sensitivity"], f"measured: int8 dynamic quantization of one Linear at a time, {len(texts)} sample texts"


def inspect_model(cfg: InspectConfig | str) -> InspectResult:
    """Parameters, bytes, FLOPs per token (prefill and decode, by layer) and KV bytes per token."""
    if isinstance(cfg, str):
        cfg = InspectConfig(model=cfg)
    t0 = time.perf_counter()
    from infertune.models.resolve import resolve_model
    from infertune.plan.arch import arch_from_config, load_config

    p = Path(cfg.model).expanduser()
    ref = None
    if p.is_file() and p.suffix == ".json":
        cfg_path, weights_dir = p, None
    else:
        ref = resolve_model(cfg.model)
        if ref.format not in ("sentence-transformers", "hf", "config"):
            raise InfertuneError(f"inspect reads Hugging Face configs; {cfg.model} is {ref.format}")
        cfg_path, weights_dir = ref.path / "config.json", ref.path
    raw = load_config(cfg_path)
    a = arch_from_config(raw)
    import torch

    model, hf = _meta_model(cfg_path, a.encoder)
    st = _st_dtypes(weights_dir) if weights_dir else {}
    cfg_dtype = str(raw.get("torch_dtype") or raw.get("dtype") or "float32").replace("torch.", "")
    st_alias = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
    by_type: dict[str, int] = defaultdict(int)
    bytes_type: dict[str, int] = defaultdict(int)
    by_dtype: dict[str, int] = defaultdict(int)
    seen: dict[int, str] = {}  # tied weights (tie_word_embeddings: lm_head.weight is embed_tokens.weight) count once
    tied: list[str] = []
    for mname, mod in model.named_modules():
        for pname, prm in mod.named_parameters(recurse=False):
            full = f"{mname}.{pname}" if mname else pname
            if id(prm) in seen:
                tied.append(f"{full} is {seen[id(prm)]} (tied: counted once, under {seen[id(prm)]}'s module type)")
                continue
            seen[id(prm)] = full
            dt = next((v for k, v in st.items() if k.endswith(full) or full.endswith(k)), None) if st else None
            dt = dt or st_alias.get(cfg_dtype, "F32")
            n = prm.numel()
            by_type[type(mod).__name__] += n
            bytes_type[type(mod).__name__] += n * ST_BYTES.get(dt, 4)
            by_dtype[dt] += n
    n = cfg.seq_len
    ids = torch.zeros(1, n, dtype=torch.long, device="meta")
    kw: dict[str, Any] = {} if a.encoder else {"use_cache": True, "logits_to_keep": 1}
    pre_total, pre_layers, pre_attn, out = _count(model, ids, **kw)
    flops = {"prefill": pre_total / n}
    layers = {k: {"prefill": v / n} for k, v in pre_layers.items()}
    share = {"prefill": pre_attn / pre_total if pre_total else 0.0}
    if not a.encoder:
        dec_total, dec_layers, dec_attn, _ = _count(model, ids[:, :1], past_key_values=out.past_key_values,
                                                    use_cache=True, logits_to_keep=1)
        flops["decode"] = dec_total
        for k, v in dec_layers.items():
            layers.setdefault(k, {})["decode"] = v
        share["decode"] = dec_attn / dec_total if dec_total else 0.0
    analytic = {"prefill": a.flops_per_token(n, "prefill")["total"]}
    if not a.encoder:
        analytic["decode"] = a.flops_per_token(n + 1, "decode")["total"]
    layout = "none (encoder)" if a.encoder else ("MLA latent" if a.mla else
                                                ("MHA" if a.kv_heads == a.heads else "MQA" if a.kv_heads == 1 else "GQA"))
    sens, src = _sensitivity(cfg, ref) if cfg.sensitivity else ([], None)
    del hf
    return InspectResult(
        model=cfg.model, model_type=a.model_type, architecture=type(model).__name__, seq_len=n,
        params=sum(by_type.values()), params_by_module_type=dict(by_type), bytes_by_module_type=dict(bytes_type),
        params_by_dtype=dict(by_dtype), bytes_total=sum(bytes_type.values()),
        dtype_source="safetensors headers" if st else f"config ({cfg_dtype})", flops_per_token=flops,
        flops_per_token_by_layer=dict(sorted(layers.items())), attention_flops_share=share,
        flops_per_token_analytic=analytic, kv_bytes_per_token=a.kv_bytes_per_token(), kv_layout=layout,
        head_dim=a.head_dim, sensitivity=sens, sensitivity_source=src,
        notes=tied + flop_notes(flops, analytic, a.experts, a.experts_per_tok), wall_s=round(time.perf_counter() - t0, 2),
    )
