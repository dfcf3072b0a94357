"""OpenVINO on the CPU: our own ONNX export read into OpenVINO, compiled with the LATENCY hint and run
with synchronous calls; int8 through NNCF post-training quantization calibrated on real texts.

Measured traps (on an AVX2-only CPU, re-checked on an AMX Xeon):
- the THROUGHPUT hint with synchronous calls runs one stream on one core; LATENCY uses all threads;
- on CPUs with AVX512_BF16/AMX OpenVINO silently runs "fp32" models in bf16 (its default
  INFERENCE_PRECISION_HINT); precision "fp32" therefore asks for f32 and `describe()` reads back what ran;
- NNCF without `model_type=TRANSFORMER` quantizes the attention softmax/residual path too (cosine 0.61);
- `SentenceTransformer(backend="openvino")` keeps ST's padding-heavy batches; optimum-intel pulls an older
  transformers and a torchvision that breaks next to torch 2.13 (not used here).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.config import Candidate
from infertune.engines.base import Backend, Embedder, missing
from infertune.errors import InfertuneError
from infertune.models.embedding import EmbeddingSpec, load_tokenizer
from infertune.registry import quant, quant_available

# candidate precision -> OpenVINO INFERENCE_PRECISION_HINT for the layers that are not int8
HINTS = {"fp32": "f32", "bf16": "bf16", "int8": "f32"}
INSTALL = "pip install 'infertune[openvino]'"


def _threads() -> int:
    """The thread count the worker (or serve) gave torch; OpenVINO gets the same."""
    import os
    import sys

    if "torch" in sys.modules:
        return int(sys.modules["torch"].get_num_threads())
    return os.cpu_count() or 1


class OpenVinoEmbedder(Embedder):
    def __init__(self, spec: EmbeddingSpec, tokenizer: Any, model: Any, device: str, info: dict,
                 precision: str = "fp32", threads: int | None = None):
        import openvino as ov

        super().__init__(spec, tokenizer, device)
        self.model = model
        self.precision = precision
        self.info = info
        self.inputs = {p.any_name for p in model.inputs}
        self.needs_token_types = "token_type_ids" in self.inputs
        config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
                  "INFERENCE_NUM_THREADS": int(threads or _threads()),
                  "INFERENCE_PRECISION_HINT": HINTS.get(precision, "f32")}
        t0 = time.perf_counter()
        self.compiled = ov.Core().compile_model(model, "CPU", config)
        self.info.setdefault("compile_s", round(time.perf_counter() - t0, 2))
        self.output = self.compiled.output("pooled")
        self._local = threading.local()  # one infer request per thread: a request is not thread-safe
        # with dynamic shapes the CPU plugin picks kernels at the first inference: one tiny batch now, so
        # describe() names real kernels (the ones picked for the latest shape), not "undef"
        self.forward(self.collate([[self.pad_id] * 8]))

    @classmethod
    def load(cls, xml: Path, spec: EmbeddingSpec, tokenizer: Any, device: str, info: dict,
             precision: str = "fp32") -> OpenVinoEmbedder:
        import openvino as ov

        return cls(spec, tokenizer, ov.Core().read_model(str(xml)), device, info, precision)

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        req = getattr(self._local, "request", None)
        if req is None:
            req = self._local.request = self.compiled.create_infer_request()
        feeds = {k: v for k, v in batch.items() if k in self.inputs}
        # the result array is a view of the request's output tensor, overwritten by the next call
        return np.array(req.infer(feeds)[self.output], dtype=np.float32, copy=True)

    def describe(self) -> dict[str, Any]:
        import openvino as ov

        c = self.compiled
        matmuls: Counter[str] = Counter()
        kernels: Counter[str] = Counter()
        for op in c.get_runtime_model().get_ordered_ops():
            rt = op.get_rt_info()
            if rt["layerType"].astype(str) in ("FullyConnected", "MatMul"):
                matmuls[rt["runtimePrecision"].astype(str)] += 1
                kernels[rt["primitiveType"].astype(str)] += 1
        fq = sum(1 for op in self.model.get_ops() if op.get_type_name() == "FakeQuantize")
        return {
            "engine": "openvino", "version": ov.get_version(), "device": "CPU",
            "inference_precision": str(c.get_property("INFERENCE_PRECISION_HINT")),
            "performance_hint": str(c.get_property("PERFORMANCE_HINT")),
            "threads": int(c.get_property("INFERENCE_NUM_THREADS")),
            "streams": int(c.get_property("NUM_STREAMS")),
            "fake_quantize_nodes": fq,
            "matmul_precisions": dict(matmuls),  # what the CPU plugin executes per FullyConnected/MatMul
            "matmul_kernels": dict(kernels),  # as picked for the latest input shape
            **self.info,
        }

    def kernel_mix(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """The weight GEMMs (FullyConnected) the CPU plugin runs after one batch, by precision (engines/kernels.py)."""
        from infertune.engines.kernels import openvino_mix

        self.forward(batch)  # kernels are picked per shape at the first inference
        return openvino_mix(self.compiled, self.model)

    def save(self, path: Path) -> dict[str, Any]:
        import openvino as ov

        path.mkdir(parents=True, exist_ok=True)
        # compress_to_fp16 defaults to True and would round fp32 weights: keep them as they are
        ov.save_model(self.model, str(path / "model.xml"), compress_to_fp16=False)
        self.tokenizer.save_pretrained(path / "tokenizer")
        (path / "tokenizer" / "infertune_embedding.json").write_text(json.dumps(self.spec.to_dict(), indent=2))
        return {"openvino": "model.xml", "weights_bin": "model.bin", "tokenizer": "tokenizer",
                "inference_precision": HINTS.get(self.precision, "f32")}


class OpenVino(Backend):
    name = "openvino"

    @classmethod
    def available(cls, candidate: Candidate, device: str) -> str | None:
        if missing("openvino"):
            return f"openvino is not installed ({INSTALL})"
        if device == "cuda":
            return "OpenVINO runs on the CPU here"
        for mod in ("torch", "onnx"):  # the ONNX export the IR is read from
            if reason := missing(mod):
                return reason
        if candidate.precision not in HINTS:
            return f"OpenVINO {candidate.precision} is not supported by infertune (fp32, bf16 or int8)"
        if candidate.precision == "int8":
            q = quant(candidate.quant) if candidate.quant else None
            if q is None or cls.name not in q.engines:
                return f"OpenVINO int8 needs quant 'nncf-ptq' (got {candidate.quant!r})"
            if reason := quant_available(candidate.quant, device):
                return reason
        elif candidate.quant:
            return f"OpenVINO {candidate.precision} takes no quantization (got {candidate.quant!r})"
        if candidate.precision == "bf16":
            from infertune.hardware.capabilities import read_cpu

            if not ({"avx512_bf16", "amx_bf16"} & read_cpu(real=True).flags):
                return "this CPU has no native bf16 (AVX512_BF16/AMX); bf16 would be emulated and slow"
        return None

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        import openvino as ov

        from infertune.engines.onnx_export import export_encoder

        if reason := cls.available(candidate, device):
            raise InfertuneError(reason)
        base = workdir / "onnx" / "model.onnx"  # shared with the onnxruntime backend
        info: dict[str, Any] = {}
        if not base.exists():
            info["export"] = export_encoder(spec, base)
        t0 = time.perf_counter()
        model = ov.Core().read_model(str(base))
        info["convert_s"] = round(time.perf_counter() - t0, 2)
        tokenizer = load_tokenizer(spec)
        if candidate.quant == "nncf-ptq":
            from infertune.quantize.nncf import quantize

            model, info["quantization"] = quantize(model, Embedder(spec, tokenizer), calibration,
                                                   keep_high=candidate.keep_high)
        return OpenVinoEmbedder(spec, tokenizer, model, device, info, candidate.precision)



def load_artifact(root: Path, manifest: dict[str, Any], candidate: Candidate, device: str) -> OpenVinoEmbedder:
    """A saved OpenVINO IR artifact (model.xml + model.bin + tokenizer/), as engines/embedding_artifact.py:load_embedder
    asks."""
    files = manifest["files"]
    spec = EmbeddingSpec(**manifest["embedding"], path=str(root / files["tokenizer"]))
    return OpenVinoEmbedder.load(root / files["openvino"], spec, load_tokenizer(spec), device,
                                 {"artifact": str(root)}, candidate.precision)
