"""Causal LMs from an HF directory, a GGUF file or a bare config (random weights).

A GGUF loads through transformers (`gguf_file=`), which dequantizes every tensor to plain fp32 and takes
~20 s on the 2-core box; such a model cannot be `save_pretrained` (it carries a gguf quantization
config). `materialize` therefore converts it once to a plain fp32 safetensors directory (config with
the quantization config removed, `from_config` + `load_state_dict`, tokenizer saved alongside) cached
under ~/.cache/infertune/lm/, and every worker loads that directory in ~2 s.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from infertune.errors import InfertuneError

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "fp8": 1, "int4": 0.5}


@dataclass(frozen=True)
class LMSpec:
    """Everything a worker needs to load the model, as plain (picklable) data."""

    name: str
    path: str  # a plain HF directory (converted from GGUF when needed)
    source: str  # hf | gguf | config
    random_weights: bool
    n_params: int
    n_layers: int
    hidden: int
    vocab: int
    max_length: int
    architecture: str

    def to_dict(self) -> dict:
        return asdict(self)

    def weight_bytes(self, precision: str) -> int:
        """Bytes of weights one decode step reads (every parameter once; tied embeddings count once)."""
        return int(self.n_params * BYTES.get(precision, 4))


def cache_root() -> Path:
    return Path(os.environ.get("INFERTUNE_CACHE", Path.home() / ".cache" / "infertune")) / "lm"


def _file_digest(f: Path) -> str:
    """Content key of a weights file: the same GGUF copied to another path (a fresh venv, a CI clone)
    reuses its one converted directory instead of adding another ~0.5 GB to the cache."""
    h = hashlib.sha256()
    with f.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


def _plain_config(cfg):
    for attr in ("quantization_config",):
        if hasattr(cfg, attr):
            try:
                delattr(cfg, attr)
            except AttributeError:
                setattr(cfg, attr, None)
    return cfg


def _convert_gguf(src: Path, gguf_file: str, dst: Path) -> None:
    """GGUF -> plain fp32 safetensors + tokenizer (the documented save_pretrained workaround)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf_file)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_file, dtype=torch.float32)
    cfg = _plain_config(AutoConfig.from_pretrained(src, gguf_file=gguf_file))
    cfg.dtype = "float32"
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]  # tied to embed_tokens
    if missing or unexpected:
        raise InfertuneError(f"GGUF conversion of {src / gguf_file} lost tensors: missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]}")
    tmp = dst.with_name(dst.name + ".tmp")
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "infertune_source.json").write_text(json.dumps({"gguf": str(src / gguf_file)}))
    tmp.replace(dst) if not dst.exists() else None


def materialize(ref) -> tuple[Path, str, bool]:
    """(plain HF directory, source kind, random_weights) for a resolved ModelRef."""
    if ref.format == "gguf":
        f = ref.path / ref.gguf_file
        dst = cache_root() / f"{f.stem}-{_file_digest(f)}"
        if not (dst / "config.json").exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            _convert_gguf(ref.path, ref.gguf_file, dst)
        return dst, "gguf", False
    if ref.format == "config":
        return ref.path, "config", True
    if ref.format == "hf":
        return ref.path, "hf", False
    raise InfertuneError(f"{ref.name} is a {ref.format} model, not a causal LM (HF directory, .gguf or config.json)")


def lm_spec(ref) -> LMSpec:
    from transformers import AutoConfig

    path, source, random_weights = materialize(ref)
    cfg = AutoConfig.from_pretrained(path)
    if random_weights and not any((path / n).exists() for n in ("tokenizer.json", "tokenizer_config.json")):
        raise InfertuneError(f"{path} has a config but no tokenizer; put a tokenizer (tokenizer.json) next to "
                             "config.json so prompts can be tokenized")
    text = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
    h, layers, vocab = text.hidden_size, text.num_hidden_layers, text.vocab_size
    n_params = _count_params(text)
    return LMSpec(name=str(ref.name), path=str(path), source=source, random_weights=random_weights,
                  n_params=n_params, n_layers=layers, hidden=h, vocab=vocab,
                  max_length=int(getattr(text, "max_position_embeddings", 2048) or 2048),
                  architecture=(getattr(cfg, "architectures", None) or ["?"])[0])


def _count_params(c) -> int:
    """Parameter count of a Llama/Qwen-style decoder from its config (no weights needed)."""
    h, inter, layers, vocab = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    heads = c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    hd = getattr(c, "head_dim", None) or h // heads
    attn = h * heads * hd * 2 + h * kv * hd * 2
    if getattr(c, "attention_bias", False):
        attn += heads * hd + 2 * kv * hd
    norms = 2 * h + (2 * hd if "qwen3" in str(getattr(c, "model_type", "")) else 0)
    per_layer = attn + 3 * h * inter + norms
    emb = vocab * h * (1 if getattr(c, "tie_word_embeddings", False) else 2)
    return layers * per_layer + emb + h


def load_tokenizer(spec: LMSpec):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec.path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_model(spec: LMSpec, precision: str = "fp32", device: str = "cpu", seed: int = 0):
    """The model in eval mode, in `precision` (fp32 | bf16 | fp16), on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = getattr(torch, DTYPES.get(precision, "float32"))
    if spec.random_weights:
        torch.manual_seed(seed)
        cfg = AutoConfig.from_pretrained(spec.path)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=dtype).to(device)
    model.eval()
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or model.config.eos_token_id
    return model
