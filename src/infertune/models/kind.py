"""What a model is for, decided once so every command agrees: an embedder (encoder or decoder based) or a
generator (causal LM).

Evidence, strongest first: the user's `--task embed|generate`; a sentence-transformers directory
(modules.json: an embedder, whatever its backbone); an infertune artifact's manifest; the architecture in
config.json (`*ForCausalLM` / `*LMHeadModel` generate, anything else embeds); for a causal architecture, the
signs of an embedding checkpoint published in causal-LM form (config_sentence_transformers.json beside it,
or "embed" in the directory's or config's name, as in Qwen3-Embedding-0.6B). A GGUF file generates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from infertune.errors import InfertuneError
from infertune.models.resolve import ModelRef

Task = Literal["embed", "generate"]
Arch = Literal["encoder", "decoder"]
TASKS = ("embed", "generate")
_CAUSAL = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
# model_type values of decoder-only transformers (a config without `architectures` still tells its family)
_DECODER_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "gemma", "gemma2",
                  "gemma3", "gemma3_text", "phi", "phi3", "gpt2", "gpt_neox", "gptj", "opt", "falcon", "deepseek_v2",
                  "deepseek_v3", "olmo", "olmo2", "starcoder2", "stablelm", "cohere", "granite", "smollm3"}


@dataclass(frozen=True)
class ModelKind:
    task: Task
    arch: Arch
    why: str  # one sentence: the evidence that decided

    @property
    def label(self) -> str:
        return {"embed": f"{self.arch} embedder", "generate": "causal LM"}[self.task]


def config_file(ref: ModelRef) -> Path:
    """The config.json of a model directory, or the .json file the user named (e.g. llama-3-8b.json)."""
    named = Path(ref.name).expanduser()
    return named if ref.format == "config" and named.is_file() else ref.path / "config.json"


def _config(ref: ModelRef) -> dict:
    try:
        return json.loads(config_file(ref).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def is_decoder_config(cfg: dict) -> bool:
    arch = cfg.get("architectures") or []
    return (any(a.endswith(_CAUSAL) for a in arch) or cfg.get("model_type") in _DECODER_TYPES
            or bool(cfg.get("is_decoder")))


def _embedding_signs(ref: ModelRef, cfg: dict) -> str:
    """Why a causal-LM-shaped checkpoint is an embedder, or '' when nothing says so."""
    if (ref.path / "config_sentence_transformers.json").exists():
        return "config_sentence_transformers.json is present"
    # names only, never whole paths: a directory above the model (a test's tmp dir, "embeddings/") says nothing
    for name in (ref.path.name, Path(ref.name).name, Path(str(cfg.get("_name_or_path", ""))).name):
        if "embed" in name.lower():
            return f"its name {name!r} says embedding"
    return ""


def model_kind(ref: ModelRef, task: str | None = None) -> ModelKind:
    """Decide what `ref` is for; `task` ('embed' | 'generate') overrides the evidence."""
    if task is not None and task not in TASKS:
        raise InfertuneError(f"unknown --task {task!r}; choose embed or generate")
    if ref.format == "gguf":
        if task == "embed":
            raise InfertuneError(f"{ref.name} is a GGUF file: embedding needs a Hugging Face or "
                                 "sentence-transformers directory (convert the GGUF with `make vllm-env`'s converter, "
                                 "or point at the HF dir)")
        return ModelKind("generate", "decoder", "a GGUF file")
    if ref.format == "artifact":
        m = json.loads((ref.path / "manifest.json").read_text())
        emb = m.get("embedding")
        if emb is not None:
            return ModelKind("embed", emb.get("arch", "encoder"), "an infertune embedding artifact")
        return ModelKind("generate", "decoder", "an infertune causal-LM artifact")
    if ref.format == "torch-file":
        return ModelKind("embed", "encoder", "a PyTorch .pt/.pth file (export reads what it holds)")
    cfg = _config(ref)
    decoder = is_decoder_config(cfg)
    arch: Arch = "decoder" if decoder else "encoder"
    if task is not None:
        if task == "generate" and not decoder:
            raise InfertuneError(f"{ref.name}: --task generate needs a causal LM, but config.json describes an encoder "
                                 f"({', '.join(cfg.get('architectures') or [cfg.get('model_type', '?')])})")
        return ModelKind(task, arch, f"--task {task}")  # type: ignore[arg-type]
    if ref.format == "sentence-transformers":
        return ModelKind("embed", arch, "a sentence-transformers directory (modules.json)")
    if not decoder:
        return ModelKind("embed", "encoder", f"config.json describes an encoder ({cfg.get('model_type', '?')})")
    sign = _embedding_signs(ref, cfg)
    if sign:
        return ModelKind("embed", "decoder", f"a causal architecture, but {sign} (--task generate to override)")
    return ModelKind("generate", "decoder", "config.json describes a causal LM (--task embed to use it as an embedder)")
