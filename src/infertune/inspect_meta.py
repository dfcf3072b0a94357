"""What torch sees of a model built on its meta device (no weights read, no memory used): its parameters by
module type, dtype and layer, and torch.utils.flop_counter's FLOPs for one forward pass, by layer."""

from __future__ import annotations

import json
import re
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infertune.plan.layers import layer_key

ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "F8_E4M3": 1, "F8_E5M2": 1}
ATTN_OPS = ("scaled_dot_product", "bmm", "flash_attention", "efficient_attention")
_BLOCK_MODULE = re.compile(r"\.layers?\.(\d+)$")  # the counter's module names: "LlamaForCausalLM.model.layers.3"
_HEAD_MODULE = re.compile(r"\.(embeddings|lm_head|pooler)$")
_BLOCK_PARAM = re.compile(r"(?:^|\.)layers?\.(\d+)\.")  # parameter names: "model.layers.3.mlp.up_proj.weight"
_HEAD_PARAM = re.compile(r"(?:^|\.)(lm_head|pooler)\.")


def st_dtypes(d: Path) -> dict[str, str]:
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


def meta_model(cfg_path: Path, body: bool):
    """The model on the meta device: its body (AutoModel: an encoder, or the body an embedder pools) or the
    causal LM with its head. Raises what transformers raises when it has no code for the config."""
    import torch

    _fast_transformers_import()
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    hf = AutoConfig.from_pretrained(str(cfg_path))
    cls = AutoModel if body else AutoModelForCausalLM
    with torch.device("meta"):
        try:
            return cls.from_config(hf, attn_implementation="sdpa")
        except (ValueError, ImportError):
            return cls.from_config(hf)


def count(model, ids, **kw) -> tuple[float, dict[str, float], float, Any]:
    """(total FLOPs, FLOPs by layer key, attention FLOPs, the model's output) of one forward pass."""
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
        m = _BLOCK_MODULE.search(name) or _HEAD_MODULE.search(name)
        if m:
            key = layer_key(int(m.group(1))) if m.group(1).isdigit() else m.group(1)
            by_layer[key] = float(sum(ops.values()))
    return total, by_layer, attn, out


@dataclass
class Tally:
    by_type: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes_by_type: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_dtype: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    tied: list[str] = field(default_factory=list)
    # layer key -> [bytes every token's weights take, bytes of routed experts]; a tied weight counts for each
    # layer that reads it (lm_head reads the embedding table once per step)
    layer_weights: dict[str, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0, 0.0]))


def _param_layer(full: str) -> str | None:
    m = _BLOCK_PARAM.search(full)
    if m:
        return layer_key(int(m.group(1)))
    m = _HEAD_PARAM.search(full)
    return m.group(1) if m else None


def tally(model, st: dict[str, str], default_dtype: str) -> Tally:
    """Parameters by module type, dtype (safetensors headers, else `default_dtype`) and layer."""
    t = Tally()
    seen: dict[int, str] = {}  # tied weights (tie_word_embeddings: lm_head.weight is embed_tokens.weight) count once
    for mname, mod in model.named_modules():
        for pname, prm in mod.named_parameters(recurse=False):
            full = f"{mname}.{pname}" if mname else pname
            dt = next((v for k, v in st.items() if k.endswith(full) or full.endswith(k)), None) if st else None
            dt = dt or default_dtype
            nbytes = prm.numel() * ST_BYTES.get(dt, 4)
            layer = _param_layer(full)
            if layer:
                t.layer_weights[layer][1 if ".experts." in f".{full}" else 0] += nbytes
            if id(prm) in seen:
                t.tied.append(f"{full} is {seen[id(prm)]} (tied: counted once, under {seen[id(prm)]}'s module type)")
                continue
            seen[id(prm)] = full
            t.by_type[type(mod).__name__] += prm.numel()
            t.bytes_by_type[type(mod).__name__] += nbytes
            t.by_dtype[dt] += prm.numel()
    return t
