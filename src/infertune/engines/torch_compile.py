"""torch.compile over the eager model (inductor; dynamic shapes so mixed lengths compile once).

Option `mode`: inductor's default, "max-autotune-no-cudagraphs", or "reduce-overhead" (CUDA graphs;
sequence lengths are bucketed to multiples of 64 so captured graphs are reused)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.batching import pad_length
from infertune.config import Candidate
from infertune.engines.base import Embedder
from infertune.engines.torch_eager import TorchEager, TorchEmbedder, build_model
from infertune.models.embedding import EmbeddingSpec, load_tokenizer


class CompiledEmbedder(TorchEmbedder):
    bucket = 0  # pad sequence length up to a multiple of this (CUDA graphs want few shapes)
    compiles_per_shape = True  # a server warms the shapes it will see before taking traffic

    def collate(self, ids: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
        batch = super().collate(ids)
        return pad_length(batch, self.bucket, self.pad_id) if self.bucket else batch

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["compiled"] = {"mode": self.candidate.option("mode", "default"), "dynamic": True, "bucket": self.bucket}
        return d


class TorchCompile(TorchEager):
    name = "torch-compile"

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        import torch

        model = build_model(spec, candidate, device)
        mode = candidate.option("mode")
        if mode == "default":
            mode = None  # inductor's default; "max-autotune-no-cudagraphs" gains a few % for minutes of autotuning
        compiled = torch.compile(model, dynamic=mode != "reduce-overhead", mode=mode)
        emb = CompiledEmbedder(spec, load_tokenizer(spec), compiled, candidate, device)
        if mode == "reduce-overhead":
            emb.bucket = 64
        emb.base_model = model
        return emb
