"""A tuned embedding artifact: the winner saved so it can be served without re-tuning (the manifest's format and
reader, shared with the causal-LM artifact, are infertune/artifact.py).

Layout:  artifact/manifest.json  +  model/ (HF weights + tokenizer) or model.onnx + tokenizer/
         or model.xml + model.bin (OpenVINO IR) + tokenizer/.
The manifest says which backend and recipe to apply at load, and carries the tune measurements that
`serve` uses to size its batching (token budget, measured batch latency). Loading it is the run side's
(engines/embedding_artifact.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infertune.artifact import FORMAT, MANIFEST


def write_manifest(path: Path, spec, candidate, result, saved: dict[str, Any]) -> Path:
    win = result.winner
    manifest = {
        "format": FORMAT,
        "infertune": __import__("infertune").__version__,
        "kind": "embedding",
        "model": spec.name,
        "source": result.config.get("model"),  # what `infertune tune` was given (serve's host check names it)
        "embedding": {k: v for k, v in spec.to_dict().items() if k != "path"},
        "candidate": candidate.model_dump(mode="json"),
        "candidate_id": candidate.id,
        "files": saved,
        "device": result.config.get("device", "cpu"),
        "tune": {
            "items_per_s": win.items_per_s,
            "latency_ms": win.latency_ms.model_dump(),
            "batch_token_budget": candidate.batching.size if candidate.batching.kind == "tokens" else None,
            "batch_max_items": candidate.batching.max_items,
            "padded_tokens_per_s": win.measurement.padded_tokens_per_s if win.measurement else None,
            "accuracy": win.accuracy.model_dump(),
            # the dimensions accuracy was judged on (tune --dimensions, Matryoshka); None: the full vector
            "accuracy_dimensions": _judged_dims(result),
            "slo_p99_ms": result.config.get("slo", {}).get("p99_ms"),
            "threads": result.environment.threads,
            # the tokenization parallelism the figure above was measured with, and the frontends per GPU that
            # `serve` starts to match it (on a GPU tune tokenizes in as many processes as serve's frontends per GPU,
            # engines/overlap.py). serve reads frontends_per_gpu unless --frontends says otherwise
            **_tokenization(result.config.get("device", "cpu")),
        },
        # the host the figures were measured on (serve compares it with its own; deploy places pods by it) and the
        # winner's peak memory in tune's worker (deploy sizes the pod's memory from it)
        "fingerprint": result.environment.model_dump(mode="json"),
        "memory": {"peak_rss_mb": win.measurement.peak_rss_mb if win.measurement else None,
                   "peak_gpu_mb": win.measurement.peak_gpu_mb if win.measurement else None,
                   "source": "the winner's tune worker: max RSS over its life (getrusage: preparing the engine "
                             "and its timed passes) and max allocated GPU memory"},
        # a compiled winner: its first compile in the tune, and the kernels the artifact carries (compile_cache.py)
        "compile": {**win.compile, "file": saved.get("compile_cache")} if win.compile else None,
        "load": {
            "python": f"infertune.engines.embedding_artifact.load_embedder({str(path)!r})",
            "serve": f"infertune serve {path}",
        },
    }
    (path / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return path / MANIFEST


def _judged_dims(result) -> int | None:
    """The dims accuracy was judged on: --dimensions N, the prefix --dimensions auto chose (None when it kept the
    full vector), or None (the full vector)."""
    want = result.config.get("dimensions")
    if want != "auto":
        return want
    d = result.dimensions or {}
    return d["chosen"] if d.get("chosen") and d.get("chosen") != d.get("full") else None


def _tokenization(device: str) -> dict[str, int]:
    import os

    from infertune.hardware.sizing import default_frontends, tokenizer_processes

    cuda = device == "cuda"
    return {"tokenizer_threads": (os.cpu_count() or 1) if cuda else 1,
            "tokenizer_processes": tokenizer_processes() if cuda else 1,
            "frontends_per_gpu": default_frontends("cuda", 1) if cuda else 1}
