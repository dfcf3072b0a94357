"""What `infertune export` takes and returns (plain data; run.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from infertune.export.check import MIN_COSINE, BucketCheck


class ExportConfig(BaseModel):
    model: str
    to: Literal["onnx", "openvino"] = "onnx"
    workload: Path | None = Field(None, description="inputs for the check and the TensorRT shapes; default: the sample")
    out: Path | None = Field(None, description="output directory; default exports/<model>-<format>")
    config: Path | None = Field(None, description="architecture (config.json directory) for a state_dict .pt")
    tokenizer: Path | None = Field(None, description="tokenizer directory for a TorchScript .pt (default: beside it)")
    pooling: str | None = None
    task: Literal["embed", "generate"] | None = None
    opset: int = Field(17, ge=14)
    min_cosine: float = Field(MIN_COSINE, gt=0, le=1)
    precision: Literal["fp16", "bf16", "int8", "fp32"] = Field("fp16", description="TensorRT script's precision")
    batch_tokens: int = Field(16384, gt=0, description="padded tokens per batch the TensorRT profiles are sized for")


class ExportResult(BaseModel):
    model: str
    source: str  # what the model reference was: sentence-transformers, hf, torchscript, state_dict, ...
    to: str
    out: str
    path: str | None  # the exported model file (None: a causal LM, scripts only)
    files: list[str]
    opset: int | None
    inputs: list[str]
    outputs: list[str]
    dynamic_axes: dict[str, dict[str, str]]
    pooling: str | None
    buckets: list[BucketCheck]
    min_cosine: float | None
    min_cosine_required: float
    passed: bool
    workload: str
    truncated_inputs: int = 0  # workload inputs longer than the model's limit (cut there, as serve does)
    tensorrt_script: str | None = None
    notes: list[str] = []
    wall_s: float
