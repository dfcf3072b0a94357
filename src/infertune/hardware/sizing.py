"""How many host processes a GPU server and a GPU tune use: read by serve (frontends), tune's GPU pass (tokenizer
processes) and the artifact (which records both); and the token budget of a first batch on each device. Plain
arithmetic on the host, kept here so that backends, serve, tune and the artifact share one rule without importing
each other."""

from __future__ import annotations

import os

from infertune.config import Batching


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


PROBE_TOKENS = {"cpu": 512, "cuda": 16384}  # the token budget of the first probe; refine searches from it


def max_items(device: str, tokens: int) -> int:
    """Item cap of a token-budget batch: CPU batches stay small anyway; on GPU short items would hit a
    fixed cap long before the budget, so the cap follows the budget (an 8-token average item)."""
    return 256 if device == "cpu" else max(256, min(8192, tokens // 8))


def tokens(device: str, n: int | None = None) -> Batching:
    n = n or PROBE_TOKENS[device]
    return Batching(kind="tokens", size=n, max_items=max_items(device, n))
