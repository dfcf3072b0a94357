"""Embedding models: read how a model pools and normalises, load its tokenizer and encoder.

Supports a sentence-transformers directory (modules.json + 1_Pooling/config.json + optional Normalize,
prompts from config_sentence_transformers.json), a plain Hugging Face encoder directory (mean pooling by
default, configurable), a decoder published as a causal LM and used as an embedder (last-token pooling and
normalisation by default, as Qwen3-Embedding, gte-Qwen2 and e5-mistral do), a config.json alone (random
weights, materialised once: for speed only) and the embedded MiniLM.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infertune.errors import InfertuneError
from infertune.models.resolve import ModelRef, resolve_model

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

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
    arch: str = "encoder"  # encoder | decoder (a causal LM's body used as an embedder)
    # instruction prompts by name, prepended to the text before tokenization (sentence-transformers' way), e.g.
    # {"query": "Instruct: ...\nQuery:", "document": ""}; default_prompt_name applies when a request names none
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    random_weights: bool = False  # materialised from a config.json: speed only, answers mean nothing

    def prompt(self, name: str | None) -> str:
        """The text to prepend for prompt `name` (None: the default prompt, if any)."""
        name = name if name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            known = ", ".join(sorted(self.prompts)) or "none"
            raise InfertuneError(f"unknown prompt name {name!r}; this model's prompts: {known}")
        return self.prompts[name]

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


def _prompts(root: Path) -> tuple[dict[str, str], str | None]:
    f = root / "config_sentence_transformers.json"
    if not f.exists():
        return {}, None
    cfg = _read_json(f)
    prompts = {str(k): str(v) for k, v in (cfg.get("prompts") or {}).items()}
    default = cfg.get("default_prompt_name")
    return prompts, (default if default in prompts else None)


def default_pooling(arch: str) -> tuple[str, bool]:
    """(pooling, normalize) when no sentence-transformers file says: a decoder embedder reads the last token (its
    only token that saw the whole text) and is compared by cosine; an encoder averages its tokens."""
    return ("last", True) if arch == "decoder" else ("mean", False)


def embedding_spec(model: str | Path | ModelRef, pooling: str | None = None, task: str | None = None,
                   prompts: dict[str, str] | None = None, default_prompt_name: str | None = None) -> EmbeddingSpec:
    """Describe an embedding model from its files (no weights are loaded). `prompts` / `default_prompt_name`
    override or extend what the model's config_sentence_transformers.json says."""
    from infertune.models.kind import config_file, model_kind

    ref = model if isinstance(model, ModelRef) else resolve_model(model)
    if pooling is not None and pooling not in POOLINGS:
        raise InfertuneError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    if ref.format not in ("sentence-transformers", "hf", "config"):
        raise InfertuneError(
            f"{ref.name} is a {ref.format} model; embedding needs a sentence-transformers or Hugging Face "
            "directory (or a config.json for random weights)"
        )
    kind = model_kind(ref, task)
    if kind.task != "embed":
        raise InfertuneError(f"{ref.name} is a causal LM ({kind.why}); pass --task embed to use it as an embedder")
    path, random_weights = ref.path, False
    if ref.format == "config":
        from infertune.models.random_weights import materialise

        path, random_weights = materialise(config_file(ref), kind.arch), True
    cfg = _read_json(path / "config.json")
    max_len = int(cfg.get("max_position_embeddings", 512))
    pool, normalize = default_pooling(kind.arch)
    if ref.format == "sentence-transformers":
        normalize = False
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
    found, default = _prompts(ref.path)
    dim = int(cfg.get("hidden_size", 0))
    spec = EmbeddingSpec(
        name=ref.name, path=str(path), pooling=pooling or pool, normalize=normalize,
        max_length=max_len, dim=dim, source_format=ref.format, arch=kind.arch, prompts=found,
        default_prompt_name=default, random_weights=random_weights,
    )
    return with_prompts(spec, prompts, default_prompt_name)


def with_prompts(spec: EmbeddingSpec, prompts: dict[str, str] | None = None,
                 default_prompt_name: str | None = None) -> EmbeddingSpec:
    """`spec` with `prompts` added (a name given again is replaced) and, if given, a new default prompt; a
    default that names no prompt is an InfertuneError. Used for a model's files and for an artifact alike."""
    import dataclasses

    merged = {**spec.prompts, **(prompts or {})}
    default = default_prompt_name if default_prompt_name is not None else spec.default_prompt_name
    if default is not None and default not in merged:
        raise InfertuneError(f"default prompt {default!r} is not among the model's prompts "
                             f"({', '.join(sorted(merged)) or 'none'}); add it with a prompt of that name")
    return dataclasses.replace(spec, prompts=merged, default_prompt_name=default)


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
    if spec.arch == "decoder":
        model.config.use_cache = False  # one forward per batch: no KV cache to build (nor to trace on export)
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
        # the last position the mask keeps, whichever side the batch was padded on (left-padded decoders put
        # every row's last token at the end; right-padded rows end at their own length); an all-pad row reads 0
        pos = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
        idx = (mask.to(pos.dtype) * (pos + 1)).amax(1).clamp(min=1) - 1
        out = hidden[torch.arange(hidden.shape[0], device=hidden.device), idx]
    else:
        s = (hidden * m).sum(1)
        n = m.sum(1).clamp(min=1)
        out = s / (n.sqrt() if kind == "mean_sqrt_len" else n)
    return out.float()


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero)."""
    import numpy as np

    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of `a` with the same row of `b` (a zero row counts as cosine 0)."""
    return (unit(a) * unit(b)).sum(1)
