"""torchao quantization configs: int8 dynamic activation + int8 weight, fp8 rowwise, and the weight-only ones
(int8, int4 in groups of 128) for small batches, where a GEMM reads its weights more than it computes.

On CPU these only pay off under torch.compile (eager int8 runs slower than fp32 here); fp8 needs a
GPU with compute capability >= 8.9 (Ada/Hopper); int4 weight-only runs torch's own CUDA kernel (tinygemm).
"""

from __future__ import annotations

from collections.abc import Iterable


def available(device: str, method: str = "torchao-int8-dyn") -> str | None:
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        return "torchao is not installed (pip install torchao)"
    if method == "torchao-int4-wo" and device != "cuda":
        return "torchao int4 weight-only runs torch's CUDA int4 kernel (tinygemm); this is not a CUDA device"
    if method == "torchao-fp8":
        if device != "cuda":
            return "torchao fp8 needs a CUDA GPU with compute capability >= 8.9"
        import torch

        if torch.cuda.get_device_capability() < (8, 9):
            return f"fp8 needs compute capability >= 8.9; this GPU is {torch.cuda.get_device_capability()}"
    return None


def apply(model, method: str, skip: Iterable[str] = ()):
    """Quantize Linear layers of `model` in place with torchao, skipping names in `skip` and the pooler."""
    import torch
    import torchao.quantization as q

    if method == "torchao-int8-dyn":
        cfg = q.Int8DynamicActivationInt8WeightConfig()
    elif method == "torchao-int8-wo":
        cfg = q.Int8WeightOnlyConfig()
    elif method == "torchao-int4-wo":
        cfg = q.Int4WeightOnlyConfig(group_size=128, int4_packing_format=int4_packing())
    elif method == "torchao-fp8":
        cfg = q.Float8DynamicActivationFloat8WeightConfig(granularity=q.PerRow())
    else:
        raise ValueError(f"unknown torchao method {method}")
    skip = set(skip)

    def keep(mod, fqn: str) -> bool:
        return isinstance(mod, torch.nn.Linear) and "pooler" not in fqn and fqn not in skip

    q.quantize_(model, cfg, filter_fn=keep)
    return model


def int4_packing() -> str:
    """torchao 0.18's default int4 layout ("plain") needs mslk >= 1.0, of which PyPI has only a 0.0.0 placeholder (it
    fails with "Requires mslk >= 1.0.0"); the tile-packed layout runs torch's own int4 kernel (tinygemm,
    aten._weight_int4pack_mm) with bf16 activations."""
    from importlib.metadata import version

    try:
        return "plain" if int(version("mslk").split(".")[0]) >= 1 else "tile_packed_to_4d"
    except Exception:  # noqa: BLE001 - not installed
        return "tile_packed_to_4d"
