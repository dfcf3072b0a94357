"""Result records. All JSON-serialisable with `.model_dump(mode="json")`.

Contract (read by other tools; extend, never rename): results.json has `baseline`, `winner`,
`candidates` (each `name`, `status`, `reason`, `items_per_s`, `latency_ms` {p50,p95,p99},
`accuracy` {cosine_mean, cosine_min, topk_overlap, by_bucket, task}), `environment` and `config`.
On a GPU each measured embedding candidate adds `peak` (Peak: achieved Linear TFLOP/s, share of the GPU's peak).
Embeddings add `ladder`: the GEMM precision ladder measured before the quantized candidates (`status`, the device,
the Linear `shapes`, per (M, K, N) `cells` with TFLOP/s and `ratio` to the 16-bit base, `expected_speedup` per
quantized kind, the `decisions` on the candidates, `seconds`).
Embeddings add `predicted_vs_measured`: plan's prediction for this host beside what the winner measured, one row
per quantity (`quantity`, `unit`, `predicted`, `measured`, `error_pct` = (predicted - measured) / measured x 100,
`note`).
"""

from __future__ import annotations

from collections.abc import Sequence
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


def latency_stats(samples_ms: Sequence[float]) -> Latency:
    """P5/P50/P95/P99, max, mean and n of latency samples in ms (no samples: an empty Latency)."""
    import numpy as np

    if not len(samples_ms):
        return Latency()
    a = np.asarray(samples_ms, dtype=float)
    p = np.percentile(a, [5, 50, 95, 99])
    return Latency(p5=float(p[0]), p50=float(p[1]), p95=float(p[2]), p99=float(p[3]), max=float(a.max()),
                   mean=float(a.mean()), n=int(a.size))


class BucketAccuracy(BaseModel):
    """Agreement with the reference on the verified texts of one token-length bucket (untruncated lengths)."""

    bucket: str  # "257-512", ">512": workload.bucket_label
    n: int
    cosine_mean: float | None = None
    cosine_min: float | None = None
    topk_overlap: float | None = Field(None, description="mean top-10 overlap of this bucket's texts (neighbours "
                                       "searched among all verified texts)")


class TaskMetric(BaseModel):
    """A figure in the user's own task terms, for the candidate and for the reference on the same texts."""

    name: str  # "recall@10", "mrr", or a name the user's --eval function returned
    source: str  # "eval-pairs" or the --eval target
    value: float | None = None
    reference: float | None = None
    higher_is_better: bool = True
    max_drop: float | None = None  # the gate; None: reported only
    n: int | None = None  # queries (eval-pairs)
    error: str | None = None  # the user's function raised on this candidate

    @property
    def drop(self) -> float | None:
        if self.value is None or self.reference is None:
            return None
        return self.reference - self.value if self.higher_is_better else self.value - self.reference


class BatchInvariance(BaseModel):
    """Each sampled text embedded alone and inside mixed batches (other neighbours, positions, padding): how far its
    vector moved (tasks/embedding/invariance.py)."""

    worst_deviation: float = Field(description="largest 1 - cos between a text's alone and batched vectors")
    n_texts: int
    n_batches: int = Field(description="mixed batches the texts were embedded in (besides alone)")
    worst_text_tokens: int = Field(description="token length of the text that moved most")
    tolerance: float | None = Field(None, description="the bound it was judged against")
    moved: list[int] = Field([], description="token lengths of the texts that moved beyond the tolerance")
    seconds: float | None = None


class Accuracy(BaseModel):
    """Agreement with the fp32 reference on the evaluation split (embeddings)."""

    cosine_mean: float | None = None
    cosine_p1: float | None = None
    cosine_min: float | None = None
    topk_overlap: float | None = Field(None, description="mean fraction of top-10 neighbours shared with the reference")
    norm_drift: float | None = Field(None, description="mean |‖x‖-‖ref‖| / ‖ref‖ before normalisation")
    n: int = 0
    by_bucket: list[BucketAccuracy] = []  # the same figures per length bucket of the verified texts
    task: list[TaskMetric] = []  # --eval-pairs and --eval: the user's task metrics beside the fidelity figures
    batch_invariance: BatchInvariance | None = None  # the same texts alone vs batched (embeddings)
    # causal LMs (kind "causal-lm"): n counts scored tokens
    ppl: float | None = None
    ppl_ref: float | None = None
    ppl_delta_rel: float | None = Field(None, description="ppl / ppl_ref - 1 on the evaluation text")
    top1_agreement: float | None = Field(None, description="fraction of positions whose argmax equals the reference's")
    kl_mean: float | None = Field(None, description="mean KL(ref || candidate) per token, nats (top-64 + tail bucket)")
    greedy_agreement: float | None = Field(
        None, description="mean fraction of greedy tokens before the first divergence")
    greedy_exact: float | None = Field(None, description="fraction of prompts whose greedy continuation matches fully")
    greedy_batch_agreement: float | None = Field(None, description=(
        "causal LMs served by vLLM: the candidate's greedy continuations sent at the workload's concurrency against "
        "its own sent one at a time (token agreement before the first difference; 1.0: answers independent of the "
        "batch)"))
    greedy_batch_moved: list[dict] | None = Field(None, description=(
        "the prompts whose continuation changed when batched: prompt tokens, tokens before the change"))


class Measurement(BaseModel):
    """Throughput and latency of one candidate over repeated passes of the eval split."""

    items_per_s: float  # the best pass (measure.py says why); the median is beside it
    items_per_s_median: float | None = None
    items_per_s_estimator: str = "median of per-pass items/s"
    items_per_s_runs: list[float]  # one figure per timed pass
    items_per_s_spread: tuple[float, float]  # (min, max) over passes
    tokens_per_s: float  # real (unpadded) tokens over the timed wall of all passes together
    padded_tokens_per_s: float
    latency_ms: Latency  # per batch, end to end (tokenize + forward + pool + to host)
    batches_per_pass: int
    items_per_pass: int
    padding_ratio: float  # padded tokens / real tokens
    p99_per_pass_ms: list[float] = []  # P99 batch latency of each timed pass
    slo_p99_ms: float | None = None  # P99 over batches of each batch's median across passes: checked against the SLO
    peak_rss_mb: float | None = None
    peak_gpu_mb: float | None = None
    passes: int
    # GPU passes that overlap tokenization with the device (engines/overlap.py): the share of the timed wall the
    # worker's main thread spent waiting for token ids and for the device; absent for other passes
    wait_share: dict[str, float] | None = None
    tokens_per_s_best: float | None = Field(None, description=(
        "real (unpadded) tokens/s of the pass items_per_s is read from (the best pass): the texts' token counts "
        "after truncation, special tokens included, padding not counted"))


class Peak(BaseModel):
    """How far a GPU candidate's Linear layers are from the GPU's dense tensor peak for its precision. Linear only:
    attention scores and values, norms and pooling are left out, so the fraction is a floor of the device's use."""

    linear_tflops: float | None = Field(None, description="achieved Linear-layer TFLOP/s (TOPS for int8): "
                                        "flops_per_token x tokens_per_s / 1e12")
    flops_per_token: float | None = Field(None, description="Linear-layer FLOPs per real token, 2 x the Linear "
                                          "weights a token multiplies through (plan's count from config.json)")
    tokens_per_s: float | None = Field(None, description="real (unpadded) tokens/s of the best timed pass "
                                       "(Measurement.tokens_per_s_best)")
    precision: str | None = Field(None, description="the peak compared against: bf16 | fp16 | fp8 | int8 | fp32 "
                                  "(mixed precision: its quantized kind)")
    peak_tflops: float | None = Field(None, description="the GPU's dense peak for that precision (gpus.toml; "
                                      "TOPS for int8)")
    fraction: float | None = Field(None, description="linear_tflops / peak_tflops")
    gpu: str | None = Field(None, description="the GPU spec table's entry (data/gpus.toml)")
    gpu_reported: str | None = Field(None, description="the GPU's name as torch reports it")
    note: str | None = Field(None, description="why a figure is missing (GPU or precision not in the table, no "
                             "config.json to count FLOPs from)")


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
    # causal LMs (kind "causal-lm"); milliseconds, each a Latency with its n
    tokens_per_s: float | None = Field(None, description="batch-1 decode tokens/s = 1000 / median TPOT at batch 1")
    ttft_ms: Latency | None = Field(None, description="time to first token at the workload's median prompt length")
    tpot_ms: Latency | None = Field(None, description="time per output token (decode step) at batch 1")
    ttft_by_length: dict[str, Latency] = {}  # "p50:143" -> prefill + first token at that prompt length
    tpot_by_batch: dict[str, Latency] = {}  # "8" -> one decode step at batch 8
    roofline_fraction: float | None = Field(None, description="batch-1 memory roofline time / measured TPOT")
    weight_bytes: int | None = None  # bytes one decode step must read (weights)
    # causal LMs served by vLLM: the load bench put on the server, and what it was started with
    goodput_rps: float | None = Field(None, description="highest request rate meeting the TTFT/TPOT P99 SLO")
    requests_per_s: float | None = Field(None, description="completed requests/s at the workload's concurrency")
    served: dict[str, Any] = {}  # checkpoint, vLLM arguments, seconds to /health, every bench point
    # the search: how far the candidate got, what it cost, why it was tried or dropped
    stage: str | None = Field(None, description="furthest stage reached: prepare | probe | full | confirm")
    time_s: float | None = Field(None, description="seconds this candidate cost the run, all stages")
    why_tried: str = ""  # what this engine is good at on this host
    probe: dict[str, Any] = {}  # the short first measurement: speed, unit, p99_ms, ...
    dropped: str | None = None  # why successive halving dropped it
    # a compiled engine's first compile, paid while preparing it: seconds (cold_s or warm_s by inductor's cache
    # state), the cache key of what decides it, how it was compiled (engines/torch_compile.py, compile_cache.py)
    compile: dict[str, Any] = {}
    # GPU runs: achieved Linear TFLOP/s and its share of the GPU's dense peak (None on a CPU or when not measured)
    peak: Peak | None = None


class PlanVsMeasured(BaseModel):
    """One of plan's predictions for this host beside the tune's measurement of it (plan/measured.py)."""

    quantity: str  # "tokens/s bound", "items/s bound", "weight memory", "peak memory"
    unit: str  # "tokens/s", "items/s", "MiB"
    predicted: float | None = None
    measured: float | None = None
    error_pct: float | None = Field(None, description="(predicted - measured) / measured x 100")
    note: str = ""  # what was predicted from, what was measured, what the model leaves out


class ArtifactVerdict(BaseModel):
    """What `infertune verify` says of an artifact whatever its family (verify.json): the family's checks are the
    subclass's fields (tasks/embedding/reverify.py, tasks/causal_lm/reverify.py)."""

    artifact: str
    model: str
    candidate_id: str
    device: str
    ok: bool
    failures: list[str]
    environment_diff: list[str]  # this host against the artifact's fingerprint, one line a difference
    path: str | None = None  # verify.json
    wall_s: float


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
    n_accuracy: int | None = None  # eval texts every candidate is verified on (embeddings: the accuracy subset)


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
    lm: dict[str, Any] = {}  # causal LMs: model facts, measured memory bandwidth, eval text size, greedy setup
    search: dict[str, Any] = {}  # stages, time per candidate, why each was or was not tried, batching search
    achievable: dict[str, Any] = {}  # when no winner: lowest P99, fastest within accuracy, flags to admit it
    # --dimensions auto (embeddings): the prefix chosen on the reference, every prefix tried, what it saves
    dimensions: dict[str, Any] = {}
    # --peers: the tuned artifact under `infertune serve` and engines users know (vLLM's pooling runner), each in
    # its own process, measured side by side over HTTP on the same texts (tasks/embedding/peers.py: PeerResult dicts)
    peers: list[dict[str, Any]] = []
    # embeddings: the GEMM precision ladder timed at the model's Linear shapes before the quantized candidates, and
    # what it decided for them (tasks/embedding/ladder.py: status, shapes, cells, expected_speedup, decisions)
    ladder: dict[str, Any] = {}
    # embeddings: plan's prediction for this host (throughput bounds, weight and peak memory) beside the winner's
    # measurement, each with its error in percent (plan/measured.py)
    predicted_vs_measured: list[PlanVsMeasured] = []
