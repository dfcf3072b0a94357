"""Export an encoder + pooling (or a TorchScript module) to ONNX (opset >= 17, dynamic batch and sequence axes) and verify
that ONNX Runtime reproduces PyTorch on real batches before anyone uses it."""  # noqa: E501

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from infertune.errors import InfertuneError
from infertune.models.embedding import EmbeddingSpec, load_encoder, pool, row_cosines

OPSET = 17


def _onnx_export(module, names: list[str], dummy: tuple, out: Path, opset: int) -> dict[str, Any]:
    """torch.onnx.export with dynamic batch and sequence axes on every input and a dynamic batch on `pooled`."""
    import torch

    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["pooled"] = {0: "batch"}
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, dummy, str(out), input_names=names, output_names=["pooled"],
                          dynamic_axes=axes, opset_version=opset, dynamo=False)
    return {"path": str(out), "opset": opset, "inputs": names, "export_s": round(time.perf_counter() - t0, 2),
            "size_mb": round(out.stat().st_size / 2**20, 1)}


def export_encoder(spec: EmbeddingSpec, out: Path, opset: int = OPSET, dummy: dict | None = None) -> dict[str, Any]:
    """Write `out` (model.onnx) whose output `pooled` is the un-normalised pooled embedding. `dummy` (input name
    -> int64 array, e.g. a real batch of the workload) is what the export traces; default a 2 x 8 batch of ones."""
    import torch

    # eager attention exports to plain MatMul/Softmax, which ORT fuses and runs faster than the SDPA export
    model = load_encoder(spec, dtype="fp32", attn="eager")
    use_tt = bool(getattr(model.config, "type_vocab_size", 0))

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            h = self.m(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state
            return pool(h, attention_mask, spec.pooling)

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if use_tt else [])
    if dummy is None:
        args = tuple(torch.ones(2, 8, dtype=torch.long) for _ in names)
    else:
        args = tuple(torch.from_numpy(np.asarray(dummy[n], dtype=np.int64)) for n in names)
    # the ONNX exporter will not trace into a loaded ScriptModule from a plain module; torch.jit.trace does,
    # and gives one ScriptModule (the loaded graph plus the pooling) that it exports as it is
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = torch.jit.trace(Pooled().eval(), args, check_trace=False)
    return _onnx_export(whole, names, args, out, opset)


def export_torchscript(module: Any, names: list[str], pooling: str, dummy: dict, out: Path,
                       opset: int = OPSET) -> dict[str, Any]:
    """A TorchScript module (torch.jit.load) to ONNX with the same `pooled` output as export_encoder: its first
    output, pooled with `pooling` when it is per token ([B, T, H]), as it is when already pooled ([B, H])."""
    import torch

    mask_at = names.index("attention_mask") if "attention_mask" in names else None

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = module

        def forward(self, *args):
            h = self.m(*args)
            h = h[0] if isinstance(h, tuple | list) else h
            if h.dim() == 3:
                mask = args[mask_at] if mask_at is not None else torch.ones(h.shape[:2], dtype=torch.long)
                return pool(h, mask, pooling)
            return h.float()

    args = tuple(torch.from_numpy(np.asarray(dummy[n], dtype=np.int64)) for n in names)
    # the ONNX exporter will not trace into a loaded ScriptModule from a plain module; torch.jit.trace does,
    # and gives one ScriptModule (the loaded graph plus the pooling) that it exports as it is
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = torch.jit.trace(Pooled().eval(), args, check_trace=False)
    return _onnx_export(whole, names, args, out, opset)


def verify_export(onnx_path: Path, spec: EmbeddingSpec, texts: list[str], min_cos: float = 0.9999) -> dict:
    """Compare ONNX Runtime against PyTorch fp32 at batch sizes 1, 7 and 32 of real text."""
    import onnxruntime as ort
    import torch

    from infertune.models.embedding import load_tokenizer

    tok = load_tokenizer(spec)
    model = load_encoder(spec, dtype="fp32")
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    feeds = {i.name for i in sess.get_inputs()}
    # the reference is each text alone (no padding at all): a padded batch compared with the same padded batch
    # would agree even where both read a pad position (last-token pooling on a left-padded batch did)
    uniq = list(dict.fromkeys(texts[:32]))
    alone = {}
    with torch.inference_mode():
        for t in uniq:
            e = {k: torch.from_numpy(v) for k, v in tok([t], truncation=True, max_length=spec.max_length,
                                                       return_tensors="np").items()}
            alone[t] = pool(model(**e).last_hidden_state, e["attention_mask"], spec.pooling).numpy()[0]
    worst = 1.0
    for bs in (1, 7, 32):
        chunk = (uniq * 32)[:bs]
        enc = tok(chunk, padding=True, truncation=True, max_length=spec.max_length, return_tensors="np")
        got = sess.run(["pooled"], {k: v.astype(np.int64) for k, v in enc.items() if k in feeds})[0]
        ref = np.stack([alone[t] for t in chunk])
        worst = min(worst, float(row_cosines(got, ref).min()))
    if worst < min_cos:
        raise InfertuneError(f"ONNX export of {spec.name} disagrees with PyTorch: min cosine {worst:.6f} < {min_cos}")
    return {"verified": True, "min_cosine": worst, "batch_sizes": [1, 7, 32]}
