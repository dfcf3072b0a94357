"""An embedding artifact run as tune saved it: its engine loaded by the loader the engine declares
(infertune.catalog) or prepared again from the saved weights; an untuned model directory or alias runs on the
reference engine (PyTorch eager fp32). serve, verify and export load through here."""

from __future__ import annotations

from pathlib import Path

from infertune.artifact import read_manifest
from infertune.config import Candidate
from infertune.hardware.sizing import tokens


def reference(device: str) -> Candidate:
    """The engine every tune compares against, and the one an untuned model is served on."""
    return Candidate(backend="torch-eager", precision="fp32", batching=tokens(device))


def load_embedder(path: str | Path, device: str | None = None):
    """Load an artifact as an Embedder (tokenize / forward / postprocess), ready to serve: by the loader its
    engine declares (infertune.catalog), else by the engine's prepare() from the saved weights."""
    from infertune.models.embedding import EmbeddingSpec
    from infertune.registry import engine, load, load_backend

    root = Path(path)
    m = read_manifest(root)
    cand = Candidate.model_validate(m["candidate"])
    dev = device or m.get("device", "cpu")
    loader = engine(cand.backend).artifact
    if loader is not None:
        return load(loader)(root, m, cand, dev)
    spec = EmbeddingSpec(**m["embedding"], path=str(root / m["files"]["weights"]))
    return load_backend(cand.backend).prepare(spec, cand, dev, root / ".work")


def load_model(path_or_name: str | Path, device: str = "cpu", pooling: str | None = None, task: str | None = None,
               prompts: dict[str, str] | None = None, default_prompt_name: str | None = None):
    """An Embedder for an artifact, or an untuned model directory / alias (PyTorch eager fp32).
    `prompts` / `default_prompt_name` add to (or override) the model's or artifact's own prompts."""
    from infertune.models.resolve import resolve_model

    ref = resolve_model(path_or_name)
    if ref.format == "artifact":
        from infertune.models.embedding import with_prompts

        emb = load_embedder(ref.path, device)
        emb.spec = with_prompts(emb.spec, prompts, default_prompt_name)
        return emb
    from infertune.models.embedding import embedding_spec
    from infertune.registry import load_backend

    spec = embedding_spec(ref, pooling, task, prompts, default_prompt_name)
    cand = reference(device)
    return load_backend(cand.backend).prepare(spec, cand, device, Path(".infertune-work"))
