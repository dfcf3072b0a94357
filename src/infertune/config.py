"""Plain-data configs: what to do. Registered implementations decide how."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infertune.durations import Seconds

Device = Literal["cpu", "cuda"]


class SLO(BaseModel):
    """Service-level objective for one batch at the chosen batching policy."""

    model_config = ConfigDict(frozen=True)
    p99_ms: float = Field(100.0, gt=0, description="P99 latency of one batch, tokenization included (ms)")


class AccuracyBudget(BaseModel):
    """How far a candidate may drift from the fp32 reference, in task terms."""

    model_config = ConfigDict(frozen=True)
    min_cosine_mean: float = Field(0.995, ge=-1, le=1)
    min_cosine_min: float = Field(0.98, ge=-1, le=1)
    min_topk_overlap: float = Field(0.0, ge=0, le=1, description="top-10 neighbour agreement; 0 = not enforced")
    # the pooled mean hides a drift on long texts: the mean cosine and the top-10 overlap are also checked in each
    # length bucket of the eval split holding at least this many verified texts (the per-item minimum covers
    # every text already; a mean over a handful of texts is one text's figure)
    min_bucket_items: int = Field(20, ge=1, description="length buckets with fewer verified texts are shown, "
                                  "not gated")
    max_recall_drop: float = Field(0.01, ge=0, le=1, description=(
        "--eval-pairs: recall@10 may fall this far below the reference's (absolute; 0.01 = one point)"))
    max_eval_drop: float = Field(0.01, ge=0, description=(
        "--eval module:function: each returned metric may be this much worse than the reference's, in the "
        "metric's own units"))
    batch_invariance_tol: float | None = Field(None, gt=0, description=(
        "embeddings: how far (1 - cos) a text's vector may move between embedded alone and inside mixed batches "
        "(other neighbours, positions, padding) before the candidate is rejected; default (1 - min_cosine_mean) / "
        "10. Engines that scale activations per batch (dynamic int8) may move up to 4x their own 1 - min cosine"))


class LMAccuracyBudget(BaseModel):
    """How far a causal-LM candidate may drift from the reference on the evaluation text."""

    model_config = ConfigDict(frozen=True)
    max_ppl_delta_rel: float = Field(0.02, ge=0, description="perplexity may rise by this fraction (0.02 = +2%)")
    min_top1_agreement: float = Field(0.97, ge=0, le=1, description="next-token argmax agreement with the reference")


class Batching(BaseModel):
    """How items are grouped into forward passes.

    fixed: `size` items per batch in arrival order (what most code does).
    tokens: items sorted by length, then packed while batch_size x longest_len <= `size` (padded tokens).
    """

    model_config = ConfigDict(frozen=True)
    kind: Literal["fixed", "tokens"] = "tokens"
    size: int = Field(4096, gt=0)
    max_items: int = Field(256, gt=0, description="cap on items per batch for the tokens policy")

    @property
    def id(self) -> str:
        return f"{'batch' if self.kind == 'fixed' else 'tokens'}-{self.size}"


class Candidate(BaseModel):
    """One way of running the model: backend x precision (x quantization) x batching.

    Frozen and hashable; `id` is stable and appears in logs, results and file names.
    """

    model_config = ConfigDict(frozen=True)
    backend: str
    precision: str = "fp32"  # fp32 | bf16 | fp16 | int8 | fp8 | mixed ...
    quant: str | None = None  # quantization method, e.g. "torch.ao-dynamic", "torchao-int8-dyn", "ort-dynamic"
    keep_high: tuple[str, ...] = ()  # layers left in higher precision (mixed precision)
    batching: Batching = Batching()
    options: tuple[tuple[str, str], ...] = ()  # backend-specific knobs, as sorted key/value pairs

    @property
    def engine_id(self) -> str:
        """Everything but batching: candidates with the same engine_id share one prepared model."""
        parts = [self.backend, self.precision]
        if self.quant:
            parts.append(self.quant)
        if self.keep_high:
            parts.append(f"keep{len(self.keep_high)}")
        parts += [f"{k}={v}" for k, v in self.options]
        return "/".join(parts)

    @property
    def id(self) -> str:
        return f"{self.engine_id}/{self.batching.id}"

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)

    @property
    def cuda_graphs(self) -> str:
        """The --cuda-graphs mode `serve` runs this candidate's engine with on a GPU, and `tune` measures it with:
        packed for batches=packed (an encoder's batches padding-free), else auto."""
        return "packed" if self.option("batches") == "packed" else "auto"


class TuneConfig(BaseModel):
    """Everything `infertune tune` needs. All fields have defaults: `TuneConfig()` tunes the embedded
    MiniLM on the built-in sample workload on the CPU."""

    model: str = "minilm"
    workload: Path | None = None
    device: Device = "cpu"
    slo: SLO = SLO()
    accuracy: AccuracyBudget = AccuracyBudget()
    quick: bool = False
    out: Path | None = None  # default runs/<timestamp>
    candidates: list[str] | None = None  # filter: substrings of candidate ids
    seed: int = 0
    eval_fraction: float = Field(0.7, gt=0, lt=1)
    max_eval_items: int | None = None
    rounds: int = Field(2, ge=1, description="timed passes over the eval split per candidate, interleaved")
    confirm_rounds: int = Field(8, ge=0, description="extra interleaved passes for the leaders and the baseline")
    tie_margin: float = Field(0.10, ge=0, lt=1, description=(
        "a simpler engine (eager < onnxruntime < compile) within this fraction of the fastest eligible "
        "candidate's items/s wins instead: the difference is inside the run-to-run noise"))
    candidate_timeout_s: Seconds = Field(600, gt=0)
    threads: int | None = None
    pooling: str | None = None  # override for plain HF encoders: mean | cls | last
    # embed | generate: what the model is for, when its files do not say (infertune.models.kind decides otherwise)
    task: Literal["embed", "generate"] | None = None
    # embeddings: verify candidates on the first N dimensions (Matryoshka; what the user will request); "auto":
    # the smallest prefix a Matryoshka model keeps within budget, chosen on the reference (tasks/embedding/dimensions)
    dimensions: int | Literal["auto"] | None = None
    # embeddings, the user's own task: labelled (query, positive[, negatives]) pairs scored by recall@10 and MRR,
    # and a user's callable `module:function` (or `path/to/file.py:function`) that gets an embed function and
    # returns named metrics; both gated on their drop from the reference (AccuracyBudget)
    eval_pairs: Path | None = None
    eval_fn: str | None = None
    # embeddings: after the tune, serve the artifact and these peers (vllm) and measure them side by side
    peers: list[str] = []
    write_artifact: bool = True
    # keep every candidate's exported files (ONNX exports, quantized ONNX) in <out>/exports instead of deleting them
    keep_exports: bool = False
    sensitivity: bool = True
    lm_accuracy: LMAccuracyBudget = LMAccuracyBudget()  # causal LMs
    lm_batches: tuple[int, ...] = Field((1, 8, 32), description="causal LMs: decode batch sizes for TPOT")
    # causal LMs served by vLLM: the pick is the highest request rate meeting both P99s (ms; None: no term)
    lm_engine: Literal["auto", "vllm", "torch"] = Field("auto", description=(
        "causal LMs: vllm = candidates are checkpoints x vLLM engine arguments, measured as served (the winner "
        "is what `infertune serve` runs); torch = infertune's own batch-1 decode loops, a roofline diagnosis; "
        "auto = vllm where a vLLM install is found, else torch"))
    slo_ttft_ms: float | None = Field(None, gt=0, description="causal LMs (vllm): P99 time to first token (ms)")
    slo_tpot_ms: float | None = Field(None, gt=0, description="causal LMs (vllm): P99 time per output token (ms)")
    lm_concurrency: int = Field(4, ge=1, description=(
        "causal LMs (vllm): requests in flight for the closed-loop points (the probe, and the pick without an SLO)"))
    lm_max_tokens: int | None = Field(None, gt=0, description=(
        "causal LMs (vllm): cap on each request's output tokens in the load (default: the workload's max_tokens)"))
    lm_vllm_args: tuple[str, ...] = Field((), description=(
        "causal LMs (vllm): arguments every server gets, the reference too (e.g. --enforce-eager, "
        "--gpu-memory-utilization 0.8); the artifact records them with the winner's own"))
    lm_time_budget_s: Seconds = Field(540, gt=0, description="causal LMs: the default time budget when "
                                    "time_budget_s is not set")
    time_budget_s: Seconds | None = Field(None, gt=0, description=(
        "wall-clock budget of the whole run, sensitivity search included; default: 300 s for embeddings "
        "on CPU (150 with --quick), 300 s on GPU (180 with --quick); lm_time_budget_s for causal LMs "
        "(a third with --quick for the torch decode loops on CPU)"))
    drop_below: float = Field(0.5, ge=0, lt=1, description=(
        "successive halving: a candidate whose probe runs below this fraction of the best verified probe "
        "so far is dropped with its figure"))

    @field_validator("workload")
    @classmethod
    def _exists(cls, v: Path | None) -> Path | None:
        if v is not None and not Path(v).exists():
            from infertune.errors import InfertuneError

            raise InfertuneError(f"workload file {v} does not exist; pass a JSONL or text file, one item per line")
        return v

    @field_validator("dimensions", mode="before")
    @classmethod
    def _dims(cls, v):
        if v is None or v == "auto":
            return v
        try:
            n = int(v)
        except (TypeError, ValueError):
            n = 0
        if isinstance(v, bool) or n < 1 or (isinstance(v, float) and v != n):
            from infertune.errors import InfertuneError

            raise InfertuneError(f"--dimensions must be a positive whole number or auto, not {v!r}")
        return n

    @field_validator("eval_pairs")
    @classmethod
    def _pairs_exist(cls, v: Path | None) -> Path | None:
        if v is not None and not Path(v).is_file():
            from infertune.errors import InfertuneError

            raise InfertuneError(f"--eval-pairs {v} is not a file; pass a JSONL file, one "
                                 '{"query": ..., "positive": ...} per line')
        return v
