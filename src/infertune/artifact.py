"""An artifact's manifest (artifact/manifest.json): its format tag and the one reader, shared by every family's
artifact (the embedding one: tasks/embedding/artifact.py writes it, engines/embedding_artifact.py loads it; the
causal-LM ones: tasks/causal_lm/artifact.py and served_artifact.py) and by serve, deploy and validate, which read
what an artifact says before loading it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError

MANIFEST = "manifest.json"
FORMAT = "infertune-artifact/1"


def read_manifest(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    f = p / MANIFEST if p.is_dir() else p
    if not f.exists():
        raise InfertuneError(f"{p} is not an infertune artifact (no {MANIFEST}); run `infertune tune` first")
    try:
        m = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise InfertuneError(f"{f}: invalid JSON ({e})") from e
    if m.get("format") != FORMAT:
        raise InfertuneError(f"{f}: unknown artifact format {m.get('format')!r} (expected {FORMAT})")
    return m
