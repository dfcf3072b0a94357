"""Random weights for a model given as a config.json (with its tokenizer files beside it): for speed and
memory only, never for answers. Materialised once into a cache directory, so every engine in a run (torch,
the ONNX export, OpenVINO, the served artifact) reads the very same weights, however each one loads them.

Cache: $INFERTUNE_CACHE/random/<hash of the config> (default ~/.cache/infertune). Seeded (0), so the same
config gives the same weights on the same torch version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                    "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja",
                    "config_sentence_transformers.json")


def cache_root() -> Path:
    return Path(os.environ.get("INFERTUNE_CACHE", Path.home() / ".cache" / "infertune"))


def materialise(config: Path, arch: str = "encoder", seed: int = 0) -> Path:
    """A Hugging Face directory with random weights for `config` (the body only: AutoModel), cached."""
    src = config.parent
    if not any((src / f).exists() for f in ("tokenizer.json", "vocab.txt", "tokenizer.model", "vocab.json")):
        raise InfertuneError(f"{config} has no tokenizer beside it (tokenizer.json, vocab.txt, ...); a config-only "
                             "model needs its tokenizer files in the same directory")
    key = hashlib.sha256(config.read_bytes() + f"{arch}:{seed}".encode()).hexdigest()[:16]
    out = cache_root() / "random" / key
    if (out / "model.safetensors").exists() or (out / "model.safetensors.index.json").exists():
        return out
    import torch
    from transformers import AutoConfig, AutoModel

    cfg = AutoConfig.from_pretrained(src)
    torch.manual_seed(seed)
    model = AutoModel.from_config(cfg, dtype=torch.float32)
    return save_model_dir(model, out, src)


def save_model_dir(model: Any, out: Path, tokenizer_dir: Path) -> Path:
    """Write `model` as a Hugging Face directory at `out` with the tokenizer files of `tokenizer_dir`, whole or
    not at all: written beside it under a name of this process, then renamed (a reader never sees half a model)."""
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for f in _TOKENIZER_FILES:
        if (tokenizer_dir / f).exists():
            shutil.copy2(tokenizer_dir / f, tmp / f)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
