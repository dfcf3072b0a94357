"""How many host processes a GPU server and a GPU tune use: read by serve (frontends), tune's GPU pass (tokenizer
processes) and the artifact (which records both). Plain arithmetic on the host's cores, kept here so that backends,
serve and the artifact share one rule without importing each other."""

from __future__ import annotations

import os


def default_frontends(device: str, gpus: int) -> int:
    """One on CPU (the cores belong to the model); on GPUs up to 12 per GPU, leaving two cores per GPU for its
    engine (batching, answers) and two for the rest. Tokenization bounds a GPU server's frontends: 12 served more
    than 8 on a 16-core H200 host (docs/measurements/2026-12-01-h200-engine-overlap, run 2)."""
    if device == "cpu":
        return 1
    g = max(1, gpus)
    return max(1, min(12 * g, (os.cpu_count() or 2) - 2 * g - 2))


def tokenizer_processes() -> int:
    """Tokenizer processes of tune's GPU pass: as many as `serve` starts frontends for one GPU, so tune measures
    the tokenization serve will have; 1 (threads of the worker, no processes) on a small host. Processes won over
    threads on an H200 (docs/measurements/2026-12-01-h200-tune-tokenizers, run 4)."""
    return default_frontends("cuda", 1)
