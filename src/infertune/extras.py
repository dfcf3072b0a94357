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
    "serve": [*_SERVE, *_TORCH],
    "serve-ceiling": _TORCH,
    "bench": _BENCH,
    "validate": _BENCH,  # + serve's when validate starts the server itself (a path, not a URL)
    "validate-start": [*_BENCH, *_SERVE, *_TORCH],
    "inspect": [("torch", "torch"), ("transformers", "torch")],
    "inspect_model": [("torch", "torch"), ("transformers", "torch")],
    "plan": [],
    "doctor": [],
    "explain": [],
}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed package
        return False


def missing(command: str) -> list[tuple[str, str]]:
    return [(m, extra) for m, extra in NEEDS.get(command, []) if not installed(m)]


def install_line(command: str) -> str | None:
    """The one line to print when something is missing, or None when everything is there."""
    gone = missing(command)  # may name a module twice (prometheus_client is in [serve] and [bench])
    if not gone:
        return None
    extras = sorted({extra for _, extra in NEEDS[command]})  # every extra the command uses: one install fixes it
    name = command.split("-")[0].replace("_model", "")
    mods = ", ".join(dict.fromkeys(m for m, _ in gone))
    return f"infertune {name} needs {mods}, not installed here; run: pip install 'infertune[{','.join(extras)}]'"


def require(command: str) -> None:
    line = install_line(command)
    if line:
        raise InfertuneError(line)
