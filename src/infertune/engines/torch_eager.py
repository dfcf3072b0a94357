"""PyTorch eager: the fp32 reference, bf16/fp16 weights, and int8 via torch.ao or torchao."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.config import Candidate
from infertune.engines.base import Backend, Embedder, missing
from infertune.models.embedding import EmbeddingSpec, load_encoder, load_tokenizer, pool
from infertune.registry import quant, quant_available


class TorchEmbedder(Embedder):
    def __init__(self, spec: EmbeddingSpec, tokenizer: Any, model: Any, candidate: Candidate, device: str):
        super().__init__(spec, tokenizer, device)
        self.model = model
        self.candidate = candidate
        cfg = getattr(model, "config", None)
        self.needs_token_types = bool(getattr(cfg, "type_vocab_size", 0))

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return self._pooled(batch).cpu().numpy()

    def _pooled(self, batch: dict[str, np.ndarray]) -> Any:
        """The pooled rows as a device tensor (queued on the device, not waited for)."""
        import torch

        cuda = str(self.device).startswith("cuda")
        t = {k: to_device(v, self.device) if cuda else torch.from_numpy(v) for k, v in batch.items()}
        kw = t
        if self.spec.arch == "decoder" and right_padded(batch["attention_mask"]):
            # causal attention: a right-padded row's tokens never see the pads after them, so the model
            # needs no padding mask (SDPA takes its causal kernel, no 4D mask is built); pooling keeps it
            kw = {k: v for k, v in t.items() if k != "attention_mask"}
        hidden = self.model(**kw).last_hidden_state
        return pool(hidden, t["attention_mask"], self.spec.pooling)

    @property
    def async_launch(self) -> bool:  # type: ignore[override]
        return str(self.device).startswith("cuda")

    def launch(self, batch: dict[str, np.ndarray]) -> Any:
        """On a GPU: queue the forward and the copy of its rows to pinned host memory, and return without
        waiting (the engine collates and answers other batches meanwhile)."""
        import torch

        if not self.async_launch:
            return TorchEmbedder.forward(self, batch)
        with torch.inference_mode():
            return to_host(self._pooled(batch))

    def collect(self, handle: Any) -> np.ndarray:
        return collect(handle)

    def synchronize(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def describe(self) -> dict[str, Any]:
        import torch

        kinds: dict[str, int] = {}
        dtypes: dict[str, int] = {}
        for _, m in self.model.named_modules():
            if not list(m.children()):
                kinds[type(m).__name__] = kinds.get(type(m).__name__, 0) + 1
        for p in self.model.parameters():
            dtypes[str(p.dtype).replace("torch.", "")] = dtypes.get(str(p.dtype).replace("torch.", ""), 0) + p.numel()
        return {
            "engine": "pytorch", "torch": torch.__version__, "device": self.device,
            "param_dtypes": dtypes, "leaf_modules": kinds,
            "attention": getattr(getattr(self.model, "config", None), "_attn_implementation", None),
            "threads": torch.get_num_threads(), "keep_high": list(self.candidate.keep_high),
        }

    def kernel_mix(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """The weight GEMMs one batch ran, by data type, and the weight bytes (engines/kernels.py)."""
        from infertune.engines.kernels import torch_mix

        return torch_mix(lambda b: TorchEmbedder.forward(self, b), batch, self.model)  # not a graph replay

    def save(self, path: Path) -> dict[str, Any]:
        """Save weights in the candidate's float dtype plus tokenizer; quantization is re-applied at load
        from the recipe in the manifest (it is deterministic and takes seconds)."""
        path.mkdir(parents=True, exist_ok=True)
        base = load_encoder(self.spec, dtype=_float_dtype(self.candidate.precision, self.candidate.quant, self.device))
        base.save_pretrained(path / "model")
        self.tokenizer.save_pretrained(path / "model")
        (path / "model" / "infertune_embedding.json").write_text(json.dumps(self.spec.to_dict(), indent=2))
        return {"weights": "model", "recipe": self.candidate.model_dump(mode="json")}


class Pending:
    """Rows on their way to pinned host memory: `event` fires when they are there."""

    __slots__ = ("event", "host")

    def __init__(self, event: Any, host: Any):
        self.event, self.host = event, host


def to_device(arr: np.ndarray, device: Any) -> Any:
    """A host array on the device without waiting for the device: staged through pinned memory (a copy from
    pageable memory makes PyTorch wait for everything queued before it)."""
    import torch

    return torch.from_numpy(arr).pin_memory().to(device, non_blocking=True)


def to_host(out: Any, rows: int | None = None) -> Pending:
    """Queue the copy of `out[:rows]` (a device tensor) to pinned host memory; collect() waits for it."""
    import torch

    src = out if rows is None else out[:rows]
    host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    host.copy_(src, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return Pending(event, host)


def collect(handle: Any) -> np.ndarray:
    """The rows of a launched batch: an array as is, a Pending once its copy is done."""
    if isinstance(handle, Pending):
        handle.event.synchronize()
        return handle.host.numpy()
    return handle


def right_padded(mask: np.ndarray) -> bool:
    """Every row starts with a token and has no token after its first pad (how our collate pads)."""
    return bool(mask.shape[1] == 0 or (mask[:, 0].all() and (mask[:, 1:] <= mask[:, :-1]).all()))


def _float_dtype(precision: str, quant: str | None = None, device: str = "cpu") -> str:
    """The floating dtype the weights are loaded in before any quantization."""
    if precision in ("bf16", "fp16"):
        return precision
    if quant and quant.startswith("torchao") and device == "cuda":
        return "bf16"  # torchao's GPU kernels expect bf16 activations
    return "fp32"


def build_model(spec: EmbeddingSpec, candidate: Candidate, device: str):
    """Load and transform the encoder for a candidate (shared by eager and compile backends)."""
    model = load_encoder(spec, dtype=_float_dtype(candidate.precision, candidate.quant, device), device=device)
    method = candidate.quant
    if method == "torch.ao-dynamic":
        from infertune.quantize.torch_ao import linear_names, quantize_dynamic_int8

        layers = [n for n in linear_names(model) if n not in set(candidate.keep_high)]
        per_channel = candidate.option("granularity", "per-channel") == "per-channel"
        model = quantize_dynamic_int8(model, layers, per_channel=per_channel)
    elif method and method.startswith("torchao"):
        from infertune.quantize.torchao import apply

        model = apply(model, method, skip=candidate.keep_high)
    return model


class TorchEager(Backend):
    name = "torch-eager"

    @classmethod
    def available(cls, candidate: Candidate, device: str) -> str | None:
        if reason := missing("torch"):
            return reason
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device visible to torch"
        if candidate.precision == "fp16" and device == "cpu":
            return "fp16 matmuls on this CPU fall back to slow paths; use bf16 on CPU"
        if candidate.precision == "bf16" and device == "cpu":
            from infertune.hardware.capabilities import read_cpu

            if not ({"avx512_bf16", "amx_bf16"} & read_cpu(real=True).flags):
                return "this CPU has no native bf16 (AVX512_BF16/AMX); bf16 would be emulated and slow"
        q = quant(candidate.quant) if candidate.quant else None
        if q is not None and "torch-eager" in q.engines:  # a torch quantizer: does it run here?
            return quant_available(candidate.quant, device)
        return None

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        model = build_model(spec, candidate, device)
        return TorchEmbedder(spec, load_tokenizer(spec), model, candidate, device)
