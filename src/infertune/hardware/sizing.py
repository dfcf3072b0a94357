"""How many host processes a GPU server and a GPU tune use: read by serve (frontends), tune's GPU pass (tokenizer
processes) and the artifact (which records both). Plain arithmetic on the host's cores, kept here so that backends,
serve and the artifact share one rule without importing each other."""

from __future__ import annotations

import os


def default_frontends(device: str, gpus: int) -> int:
    """One on CPU (the cores belong to the model); on GPUs up to 12 per GPU, leaving two cores per GPU for its
    engine (batching, answers) and two for the rest. Tokenization bounds a GPU server's frontends: session 11,
    H200 host of 16 cores, MiniLM packed, same run: 12 frontends served 40,813 items/s at 32 texts per request and
    22,848 req/s at 1 text, 8 frontends 36,992 and 19,790."""
    if device == "cpu":
        return 1
    g = max(1, gpus)
    return max(1, min(12 * g, (os.cpu_count() or 2) - 2 * g - 2))


def tokenizer_processes() -> int:
    """Tokenizer processes of tune's GPU pass: as many as `serve` starts frontends for one GPU (the issue's "same
    parallel tokenization"); 1 (threads of the worker, no processes) on a small host. Processes won on the H200
    (docs/measurements/2026-12-01-h200-tune-tokenizers: 12 processes 28,606 items/s, threads 25,824, one run)."""
    return default_frontends("cuda", 1)
