"""Embedding models: read how a model pools and normalises, load its tokenizer and encoder.

Supports a sentence-transformers directory (modules.json + 1_Pooling/config.json + optional Normalize),
a plain Hugging Face encoder directory (mean pooling by default, configurable) and the embedded MiniLM.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError
from infertune.models.resolve import ModelRef, resolve_model

POOLINGS = ("mean", "cls", "max", "last", "mean_sqrt_len")


@dataclass(frozen=True)
class EmbeddingSpec:
    """Everything needed to turn token ids into the model's embedding, besides the weights."""

    name: str
    path: str  # directory with config.json, weights and tokenizer files
    pooling: str = "mean"
    normalize: bool = False
    max_length: int = 512
    dim: int = 0
    source_format: str = "hf"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read_json(p: Path) -> dict:
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InfertuneError(f"cannot read {p}: {e}") from e


def _st_pooling(cfg: dict) -> str:
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    if cfg.get("pooling_mode_max_tokens"):
        return "max"
    if cfg.get("pooling_mode_mean_sqrt_len_tokens"):
        return "mean_sqrt_len"
    if cfg.get("pooling_mode_lasttoken"):
        return "last"
    return "mean"


def embedding_spec(model: str | Path | ModelRef, pooling: str | None = None) -> EmbeddingSpec:
    """Describe an embedding model from its files (no weights are loaded)."""
    ref = model if isinstance(model, ModelRef) else resolve_model(model)
    if pooling is not None and pooling not in POOLINGS:
        raise InfertuneError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    if ref.format not in ("sentence-transformers", "hf"):
        raise InfertuneError(
            f"{ref.name} is a {ref.format} model; embedding tune needs a sentence-transformers or "
            "Hugging Face encoder directory with weights"
        )
    path = ref.path
    cfg = _read_json(path / "config.json")
    max_len = int(cfg.get("max_position_embeddings", 512))
    normalize, pool = False, "mean"
    if ref.format == "sentence-transformers":
        modules = json.loads((path / "modules.json").read_text())
        for m in modules:
            mtype = m.get("type", "")
            if mtype.endswith("Pooling"):
                pool = _st_pooling(_read_json(path / m["path"] / "config.json"))
            elif mtype.endswith("Normalize"):
                normalize = True
            elif mtype.endswith("Transformer") and m.get("path"):
                path = path / m["path"]
        sbert = path / "sentence_bert_config.json"
        if not sbert.exists():
            sbert = ref.path / "sentence_bert_config.json"
        if sbert.exists():
            max_len = min(max_len, int(_read_json(sbert).get("max_seq_length", max_len)))
    dim = int(cfg.get("hidden_size", 0))
    return EmbeddingSpec(
        name=ref.name, path=str(path), pooling=pooling or pool, normalize=normalize,
        max_length=max_len, dim=dim, source_format=ref.format,
    )


def load_tokenizer(spec: EmbeddingSpec):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(spec.path)
    except Exception as e:  # noqa: BLE001 - report any loader failure as a user-facing error
        raise InfertuneError(f"cannot load a tokenizer from {spec.path}: {e}") from e


def load_encoder(spec: EmbeddingSpec, dtype: str = "fp32", device: str = "cpu", attn: str | None = None):
    """Load the transformer body (no pooling head) in eval mode."""
    import torch
    from transformers import AutoModel

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if attn:
        kwargs["attn_implementation"] = attn
    try:
        model = AutoModel.from_pretrained(spec.path, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise InfertuneError(f"cannot load encoder weights from {spec.path}: {e}") from e
    return model.eval().to(device)


def pool(hidden, mask, kind: str):
    """Pool token states [B, T, H] with attention mask [B, T] into [B, H] (float32)."""
    import torch

    m = mask.unsqueeze(-1).to(hidden.dtype)
    if kind == "cls":
        out = hidden[:, 0]
    elif kind == "max":
        out = hidden.masked_fill(m == 0, torch.finfo(hidden.dtype).min).amax(1)
    elif kind == "last":
        idx = mask.sum(1).clamp(min=1) - 1
        out = hidden[torch.arange(hidden.shape[0], device=hidden.device), idx]
    else:
        s = (hidden * m).sum(1)
        n = m.sum(1).clamp(min=1)
        out = s / (n.sqrt() if kind == "mean_sqrt_len" else n)
    return out.float()
