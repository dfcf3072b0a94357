"""Result records. All JSON-serialisable with `.model_dump(mode="json")`.

Contract (read by other tools; extend, never rename): results.json has `baseline`, `winner`,
`candidates` (each `name`, `status`, `reason`, `items_per_s`, `latency_ms` {p50,p95,p99},
`accuracy` {cosine_mean, cosine_min, topk_overlap}), `environment` and `config`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Status = Literal["ok", "failed", "skipped", "rejected"]


class Latency(BaseModel):
    """Latency percentiles in milliseconds over n samples."""

    p5: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    mean: float | None = None
    n: int = 0


class Accuracy(BaseModel):
    """Agreement with the fp32 reference on the evaluation split (embeddings)."""

    cosine_mean: float | None = None
    cosine_p1: float | None = None
    cosine_min: float | None = None
    topk_overlap: float | None = Field(None, description="mean fraction of top-10 neighbours shared with the reference")
    norm_drift: float | None = Field(None, description="mean |‖x‖-‖ref‖| / ‖ref‖ before normalisation")
    n: int = 0


class Measurement(BaseModel):
    """Throughput and latency of one candidate over repeated passes of the eval split."""

    items_per_s: float
    items_per_s_runs: list[float]  # one figure per timed pass
    items_per_s_spread: tuple[float, float]  # (min, max) over passes
    tokens_per_s: float
    padded_tokens_per_s: float
    latency_ms: Latency  # per batch, end to end (tokenize + forward + pool + to host)
    batches_per_pass: int
    items_per_pass: int
    padding_ratio: float  # padded tokens / real tokens
    peak_rss_mb: float | None = None
    peak_gpu_mb: float | None = None
    passes: int


class CandidateResult(BaseModel):
    name: str
    candidate: dict[str, Any] = {}
    status: Status
    reason: str = ""
    items_per_s: float | None = None
    latency_ms: Latency = Latency()
    accuracy: Accuracy = Accuracy()
    measurement: Measurement | None = None
    speedup_vs_baseline: float | None = None
    prepare_s: float | None = None
    executed: dict[str, Any] = {}  # what actually ran: dtypes, providers, quantized layer counts...
    meets_slo: bool | None = None
    meets_accuracy: bool | None = None


class EnvFingerprint(BaseModel):
    hostname: str = ""
    os: str = ""
    python: str = ""
    cpu_model: str = ""
    cpu_cores_logical: int | None = None
    cpu_cores_physical: int | None = None
    cpu_flags: list[str] = []
    ram_gb: float | None = None
    gpu: list[dict[str, Any]] = []
    libraries: dict[str, str | None] = {}
    threads: int | None = None
    timestamp: str = ""


class LayerSensitivity(BaseModel):
    layer: str
    cosine_mean: float
    cosine_min: float
    drop: float  # 1 - cosine_mean


class WorkloadSummary(BaseModel):
    source: str
    n_items: int
    n_calibration: int
    n_eval: int
    tokens_mean: float
    tokens_p50: float
    tokens_p90: float
    tokens_p99: float
    tokens_max: int
    over_limit: int  # items longer than the model's max length (truncated)
    max_length: int
    histogram: list[dict[str, Any]]  # [{"bucket": "1-16", "count": n}, ...]


class TuneResult(BaseModel):
    kind: Literal["embedding", "causal-lm"] = "embedding"
    model: str
    config: dict[str, Any]
    environment: EnvFingerprint
    workload: WorkloadSummary | None = None
    baseline: CandidateResult | None = None
    reference: str | None = None
    winner: CandidateResult | None = None
    candidates: list[CandidateResult] = []
    pareto: list[str] = []
    decision: list[str] = []  # human sentences: why the winner won
    sensitivity: list[LayerSensitivity] = []
    mixed_precision: dict[str, Any] = {}
    artifact: str | None = None
    out_dir: str | None = None
    started: str = ""
    wall_s: float | None = None
    next_command: str | None = None
