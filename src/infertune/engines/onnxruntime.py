"""ONNX Runtime: export once (verified against PyTorch), optionally quantize to int8 (dynamic, or static
QDQ with activation ranges calibrated on the workload's calibration texts), run on the CPU provider, or on
CUDA's on a GPU when this onnxruntime build has it. The TensorRT execution provider is not used: the TensorRT
route is `infertune export` + the trtexec script it writes (plan/tensorrt.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.config import Candidate
from infertune.engines.base import Backend, Embedder, missing
from infertune.models.embedding import EmbeddingSpec, load_tokenizer
from infertune.registry import quant


class OrtEmbedder(Embedder):
    def __init__(self, spec: EmbeddingSpec, tokenizer: Any, onnx_path: Path, device: str, info: dict):
        import onnxruntime as ort

        super().__init__(spec, tokenizer, device)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers = ["CPUExecutionProvider"]
        if device == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(onnx_path), opts, providers=providers)
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.needs_token_types = "token_type_ids" in self.inputs
        self.onnx_path = onnx_path
        self.info = info

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        feeds = {k: v for k, v in batch.items() if k in self.inputs}
        return self.session.run(["pooled"], feeds)[0]

    def describe(self) -> dict[str, Any]:
        import onnxruntime as ort

        return {"engine": "onnxruntime", "version": ort.__version__, "providers": self.session.get_providers(),
                "model_mb": round(self.onnx_path.stat().st_size / 2**20, 1), **self.info}

    def kernel_mix(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """The weight GEMMs one batch ran, by data type, from ORT's own profile (engines/kernels.py)."""
        from infertune.engines.kernels import ort_mix

        feeds = {k: v for k, v in batch.items() if k in self.inputs}
        return ort_mix(self.onnx_path, self.session.get_providers(), feeds)

    def save(self, path: Path) -> dict[str, Any]:
        path.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.onnx_path, path / "model.onnx")
        self.tokenizer.save_pretrained(path / "tokenizer")
        (path / "tokenizer" / "infertune_embedding.json").write_text(json.dumps(self.spec.to_dict(), indent=2))
        return {"onnx": "model.onnx", "tokenizer": "tokenizer"}


class OnnxRuntime(Backend):
    name = "onnxruntime"

    @classmethod
    def available(cls, candidate: Candidate, device: str) -> str | None:
        for mod in ("onnxruntime", "onnx", "torch"):
            if reason := missing(mod):
                return reason
        if device == "cuda":
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                return "this onnxruntime build has no CUDAExecutionProvider (pip install onnxruntime-gpu)"
            if candidate.quant:
                return "ORT int8 runs on the CPU provider only here"
        if candidate.precision not in ("fp32", "int8", "mixed"):
            return f"ONNX Runtime {candidate.precision} on this device is not supported by infertune yet"
        if candidate.quant is not None and cls.name not in getattr(quant(candidate.quant), "engines", ()):
            return f"ONNX Runtime has no quantization {candidate.quant!r} (ort-dynamic or ort-static)"
        return None

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        from infertune.engines.onnx_export import export_encoder, verify_export

        base = workdir / "onnx" / "model.onnx"
        info: dict[str, Any] = {}
        if not base.exists():
            info["export"] = export_encoder(spec, base)
            info["export_check"] = verify_export(base, spec, list(calibration[:32]) or ["hello world"])
        path = base
        if candidate.quant == "ort-dynamic":
            from infertune.quantize.ort import matmul_node_for, quantize_dynamic

            path = workdir / "onnx" / f"{candidate.engine_id.replace('/', '_')}.onnx"
            exclude = [matmul_node_for(n) for n in candidate.keep_high]
            per_channel = candidate.option("granularity", "per-channel") == "per-channel"
            info["quantization"] = quantize_dynamic(base, path, per_channel=per_channel, exclude=exclude)
        tokenizer = load_tokenizer(spec)
        if candidate.quant == "ort-static":
            from infertune.quantize.ort import matmul_node_for, quantize_static

            path = workdir / "onnx" / f"{candidate.engine_id.replace('/', '_')}.onnx"
            info["quantization"] = quantize_static(
                base, path, Embedder(spec, tokenizer), calibration,
                per_channel=candidate.option("granularity", "per-channel") == "per-channel",
                exclude=[matmul_node_for(n) for n in candidate.keep_high],
                method=candidate.option("calibration", "minmax"),
                ffn_down_int8=candidate.option("ffn_down", "fp32") == "int8")
        return OrtEmbedder(spec, tokenizer, path, device, info)


def load_artifact(root: Path, manifest: dict[str, Any], candidate: Candidate, device: str) -> OrtEmbedder:
    """A saved ONNX Runtime artifact (model.onnx + tokenizer/), as engines/embedding_artifact.py:load_embedder asks."""
    files = manifest["files"]
    spec = EmbeddingSpec(**manifest["embedding"], path=str(root / files["tokenizer"]))
    return OrtEmbedder(spec, load_tokenizer(spec), root / files["onnx"], device, {"artifact": str(root)})
