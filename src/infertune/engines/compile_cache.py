"""Compile work reused: where inductor keeps what it compiled, what decides it, and the kernels an artifact carries.

- inductor's own cache (FX graphs, AOT graphs, Triton kernels, content-keyed by torch itself) lives in
  `~/.cache/infertune/inductor` (`$XDG_CACHE_HOME` moves it; a `TORCHINDUCTOR_CACHE_DIR` the user set is kept),
  not in /tmp, so it outlives a reboot and a container restart that keeps the home volume.
- the cache key recorded next to every compiled candidate names what decides a compile: torch, triton,
  transformers and torchao versions, the device (GPU name and compute capability, or the CPU's model), the model's
  config and the candidate's engine. Two runs with the same key reuse each other's work.
- the artifact of a compiled winner carries `compile_cache.bin` (torch.compiler.save_cache_artifacts: every
  kernel and graph the tune's worker compiled or read); `serve` loads it before the first forward, so a host with
  a cold cache starts from the tune's kernels (only dynamo's tracing runs again, seconds)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

FILE = "compile_cache.bin"


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "infertune" / "inductor"


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("torch", "triton", "transformers", "torchao"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name()} sm{''.join(map(str, torch.cuda.get_device_capability()))}"
    import platform

    return platform.processor() or platform.machine()


def _config_text(model_path: str) -> str:
    p = Path(model_path) / "config.json"
    return p.read_text() if p.is_file() else model_path


def key(model_path: str, engine_id: str, device: str) -> tuple[str, dict[str, Any]]:
    """A short key for what decides a compile, and the parts it was made from (results.json shows both)."""
    parts = {"versions": _versions(), "device": _device_name(device), "engine": engine_id,
             "model_config_sha": hashlib.sha256(_config_text(model_path).encode()).hexdigest()[:16]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16], parts


def setup(spec: Any, candidate: Any, device: str, workdir: Path | None = None) -> dict[str, Any]:
    """Point inductor at the persistent cache, load the kernels an artifact carries (next to its weights), and
    return what was done: {cache_key, cache_dir, from_artifact}."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    # torch writes its default into the environment once inductor is imported: only that one is replaced
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, default_cache_dir()):
        cache_dir().mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir())
    k, parts = key(spec.path, candidate.engine_id, device)
    info: dict[str, Any] = {"cache_key": k, "cache_dir": os.environ["TORCHINDUCTOR_CACHE_DIR"],
                            "key_parts": parts, "from_artifact": False}
    carried = Path(spec.path).parent / FILE
    if carried.is_file():
        info["from_artifact"] = load(carried)
    return info


def load(path: Path) -> bool:
    """Hand an artifact's compiled kernels to torch's caches; False (and a log line) when they do not load."""
    import logging

    import torch

    try:
        if torch.compiler.load_cache_artifacts(path.read_bytes()) is not None:
            return True
        why = "torch did not accept them"
    except Exception as e:  # noqa: BLE001 - a stale or foreign cache only costs a compile
        why = f"{type(e).__name__}: {e}"
    logging.getLogger("infertune").warning("compiled kernels in %s not loaded (%s); compiling", path, why)
    return False


def save(path: Path) -> dict[str, Any] | None:
    """Write what this process compiled (or read from a cache) to `path/compile_cache.bin`; None when nothing."""
    import torch

    got = torch.compiler.save_cache_artifacts()
    if not got:
        return None
    blob = got[0]
    (path / FILE).write_bytes(blob)
    return {"compile_cache": FILE, "compile_cache_bytes": len(blob)}
