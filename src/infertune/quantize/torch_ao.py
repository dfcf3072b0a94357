"""PyTorch's built-in dynamic int8 quantization (torch.ao.quantization.quantize_dynamic).

Weights int8 (per output channel by default: per-tensor drops MiniLM to cosine 0.95), activations
quantized on the fly. CPU only (fbgemm / onednn kernels, VNNI/AMX where present).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable


def available(device: str, method: str = "torch.ao-dynamic") -> str | None:
    if device != "cpu":
        return "torch.ao dynamic int8 kernels are CPU-only"
    return None


def linear_names(model) -> list[str]:
    import torch

    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "pooler" not in n]


def quantize_dynamic_int8(model, layers: Iterable[str] | None = None, per_channel: bool = True):
    """Quantize the named Linear layers (default: all but the pooler) to dynamic int8, in place copy."""
    import torch
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    names = set(layers) if layers is not None else set(linear_names(model))
    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {n: qconfig for n in names}, dtype=torch.qint8, inplace=False)
