"""What each command needs beyond the core install, checked before any of it is imported.

`pip install infertune` is torch-free: plan and doctor work with it alone. A command whose extra is
missing stops with one line naming the install to run (InfertuneError, exit 2) instead of a
ModuleNotFoundError traceback somewhere inside the run.
"""

from __future__ import annotations

import importlib.util

from infertune.errors import InfertuneError

# module to look for -> the extra that installs it
_TORCH = [("torch", "torch"), ("transformers", "torch"), ("sentence_transformers", "torch")]
_SERVE = [("fastapi", "serve"), ("uvicorn", "serve"), ("prometheus_client", "serve")]
_BENCH = [("aiohttp", "bench"), ("httptools", "bench"), ("prometheus_client", "bench"), ("matplotlib", "bench")]

NEEDS: dict[str, list[tuple[str, str]]] = {
    "tune": [*_TORCH, ("matplotlib", "report")],
    "verify": _TORCH,
    "serve": [*_SERVE, *_TORCH],
    "serve-ceiling": _TORCH,
    "bench": _BENCH,
    "validate": _BENCH,  # + serve's when validate starts the server itself (a path, not a URL)
    "validate-start": [*_BENCH, *_SERVE, *_TORCH],
    "inspect": [("torch", "torch"), ("transformers", "torch")],
    "inspect_model": [("torch", "torch"), ("transformers", "torch")],
    "export": [*_TORCH[:2], ("onnx", "onnx"), ("onnxruntime", "onnx")],  # --to openvino: + [openvino], checked there
    "plan": [],
    "doctor": [],
    "explain": [],
    "deploy": [],  # validation needs [deploy]; without it the files are written and marked "not validated"
}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed package
        return False


def missing(command: str) -> list[tuple[str, str]]:
    return [(m, extra) for m, extra in NEEDS.get(command, []) if not installed(m)]


def pip_install(extras: list[str]) -> str:
    """The pip command that adds `extras` to this install: from the source checkout this code runs from
    (editable), from the local directory it was installed from (PEP 610 direct_url.json), else by name."""
    from pathlib import Path

    spec = f"[{','.join(extras)}]"
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "src" / "infertune").is_dir():
        return f"pip install -e '{root}{spec}'"
    try:
        import json
        from importlib.metadata import distribution
        from urllib.parse import unquote, urlparse

        direct = json.loads(distribution("infertune").read_text("direct_url.json") or "{}")
        url = urlparse(direct.get("url", ""))
        if url.scheme == "file" and Path(unquote(url.path)).is_dir():
            editable = "-e " if direct.get("dir_info", {}).get("editable") else ""
            return f"pip install {editable}'{unquote(url.path)}{spec}'"
    except Exception:  # noqa: BLE001 - no metadata (running from a copy): the name
        pass
    return f"pip install 'infertune{spec}'"


def install_line(command: str) -> str | None:
    """The one line to print when something is missing, or None when everything is there."""
    gone = missing(command)  # may name a module twice (prometheus_client is in [serve] and [bench])
    if not gone:
        return None
    extras = sorted({extra for _, extra in NEEDS[command]})  # every extra the command uses: one install fixes it
    name = command.split("-")[0].replace("_model", "")
    mods = ", ".join(dict.fromkeys(m for m, _ in gone))
    return f"infertune {name} needs {mods}, not installed here; run: {pip_install(extras)}"


def require(command: str) -> None:
    line = install_line(command)
    if line:
        raise InfertuneError(line)
