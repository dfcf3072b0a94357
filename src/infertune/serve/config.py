"""What `serve` needs (ServeConfig), what it returns (ServeResult), and how unset knobs get their values:
from the artifact's tune measurements where present, else from defaults that suit the device."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, Field

from infertune.durations import Seconds

Source = Literal["flag", "artifact", "default"]
# Padding cap of a CPU batch (padded/real tokens). On CPU a forward pass costs in proportion to padded
# tokens, so under load the token budget alone packed mixed lengths into batches that ran slower per item
# than single requests (MiniLM fp32, 2-core box, 36-44 req/s: 4-8 items/batch at 140-168 padded tokens per
# item vs 82 alone; throughput fell from 36 to 25-28 req/s and a queue never drained)
CPU_MAX_PADDING = 1.25


class ServeConfig(BaseModel):
    """Everything `infertune serve` needs. Knobs left as None are sized from the artifact (tune
    measurements) or from device defaults; `Settings.sources` says which."""

    model: str = "minilm"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    device: Literal["cpu", "cuda"] | None = None  # default: the artifact's device, else cpu
    api_key: str | list[str] | None = Field(None, description=(
        "Bearer key(s) required on everything but /health: one, a list, or comma-separated"))
    rate_limit: float | None = Field(None, gt=0, description=(
        "requests per second per API key (token bucket, bursts of one second's worth); needs api_key"))
    served_model_name: str | None = None
    batch_tokens: int | None = Field(None, gt=0, description="padded-token budget per forward pass")
    max_batch_items: int | None = Field(None, gt=0)
    max_batch_tokens: int | None = Field(None, gt=0, description=(
        "under load (more ready items than one budget holds) batches grow up to this many padded tokens; "
        "default 4x batch_tokens on CUDA, batch_tokens (no growth) on CPU"))
    max_wait_ms: float | None = Field(None, ge=0, description="how long a lone item waits for company")
    max_padding: float | None = Field(None, ge=1, description=(
        "a batch closes before its padded/real token ratio passes this; default 1.25 on CPU (compute "
        "scales with padded tokens), off on CUDA"))
    tokenize_workers: int | None = Field(None, ge=1, le=64)
    threads: int | None = Field(None, ge=1, description="torch intra-op threads")
    max_queue: int = Field(512, ge=1, description="requests admitted and not yet answered; more get 429")
    max_wait_s: Seconds | None = Field(None, gt=0, description=(
        "a request's deadline unless it sends X-Infertune-Deadline-Ms: refused (429) when the work ahead of it is "
        "expected to take longer, and (503) when the engine finished nothing for longer. Default: 10x the "
        "artifact's P99 SLO, at least 1 s; 10 s without one"))
    max_items_per_request: int = Field(2048, ge=1)
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    request_timeout_s: Seconds = Field(60.0, gt=0)
    truncate: bool = False  # False: reject over-length input with 400 (as OpenAI does)
    graceful_timeout_s: Seconds = Field(60.0, gt=0)
    drain_s: Seconds = Field(2.0, ge=0, description=(
        "after SIGTERM, /ready fails and new connections are still accepted for this long before the "
        "graceful shutdown (Kubernetes: keep it below terminationGracePeriodSeconds minus the drain)"))
    frontends: int | None = Field(None, ge=1, le=64, description=(
        "HTTP/tokenizer processes sharing the port; more than one (or more than one device) runs the model "
        "in engine processes. Default: 1 on CPU or with fewer than 8 cores, else min(8, cores/2) per GPU"))
    devices: list[str] | None = Field(None, description=(
        "cuda devices to serve on, one engine process each (e.g. ['cuda:0', 'cuda:1']); default: every "
        "visible GPU when the device is cuda"))
    task: Literal["embed"] | None = Field(None, description=(
        "embed: serve a causal-LM checkpoint as an embedder (decoder embedders published as *ForCausalLM, e.g. "
        "Qwen3-Embedding without modules.json); default: decided from the model's files (infertune.models.kind)"))
    pooling: str | None = Field(None, description="override the pooling: mean | cls | max | last | mean_sqrt_len")
    prompts: dict[str, str] = Field(default_factory=dict, description=(
        "instruction prompts by name, added to (or replacing) the model's own from config_sentence_transformers"
        ".json; a request picks one with the non-OpenAI field 'prompt_name' (as TEI does)"))
    default_prompt_name: str | None = Field(None, description=(
        "the prompt applied when a request names none (default: the model's own default_prompt_name, else none)"))
    cuda_graphs: Literal["auto", "on", "off", "padded", "packed"] | None = Field(None, description=(
        "on a GPU, capture each bucketed batch shape of a PyTorch engine as a CUDA graph (checked against the "
        "eager forward) and replay it: auto = wherever it can (PyTorch eager, float weights, SDPA attention), "
        "with a decoder's batches packed padding-free; padded = graphs over padded batches only; packed = an "
        "encoder's batches packed too. None: what the artifact's tune measured (packed for a batches=packed "
        "winner), else auto"))
    strict_host: bool = Field(False, description=(
        "refuse to serve an artifact whose tune host differs from this one in a way that changes speed or "
        "correctness (CPU features its engine uses, GPU compute capability or product, the engine's version)"))
    verify: bool = Field(False, description=(
        "an artifact: embed its held texts and check them against its reference vectors and accuracy budget "
        "before serving (infertune verify's accuracy half); refuse to start when they fail"))
    log_level: str = "warning"
    worker_process: bool = False  # the model in a supervised engine process (the processes topology, 1 frontend)
    worker_timeout_s: Seconds = Field(60.0, gt=0, description="an engine process that holds requests and sends "
                                      "nothing (no answer, no heartbeat: a busy engine beats after every batch) "
                                      "for this long is stalled: it is killed and restarted")

    @property
    def api_keys(self) -> list[str]:
        from infertune.serve.limits import split_keys

        return split_keys(self.api_key)

    def load_options(self) -> dict[str, Any]:
        """What engines/embedding_artifact.load_model needs besides the model and device (passed to every engine
        process)."""
        return {"task": self.task, "pooling": self.pooling, "prompts": dict(self.prompts),
                "default_prompt_name": self.default_prompt_name}


class Settings(BaseModel):
    """The engine knobs actually used, and where each came from."""

    batch_tokens: int
    max_batch_items: int
    max_batch_tokens: int = 0  # 0: never grow past batch_tokens
    max_wait_ms: float
    max_padding: float | None = None  # None: budget only
    tokenize_workers: int
    threads: int | None
    device: str
    cuda_graphs: str = "auto"
    max_wait_s: float = 10.0  # admission's default deadline (serve/admission.py)
    sources: dict[str, Source] = {}


class ServeResult(BaseModel):
    model: str
    url: str
    settings: Settings | None = None
    load_s: float | None = None
    uptime_s: float = 0.0
    requests: dict[str, int] = {}  # by HTTP status
    items: int = 0
    batches: int = 0
    exit_reason: str = ""


def resolve_settings(cfg: ServeConfig, manifest: dict[str, Any] | None) -> Settings:
    """Flags win; then the artifact's tune measurements; then device defaults."""
    from infertune.serve.admission import default_max_wait_s

    tune = (manifest or {}).get("tune") or {}
    device = cfg.device or (manifest or {}).get("device") or "cpu"
    cpu = device == "cpu"
    if cfg.cuda_graphs in ("on", "packed") and cpu:
        from infertune.errors import InfertuneError

        raise InfertuneError(f"--cuda-graphs {cfg.cuda_graphs} needs a GPU (--device cuda); this model would be "
                             "served on cpu")
    sources: dict[str, Source] = {}

    def pick(name: str, flag: Any, measured: Any, default: Any) -> Any:
        if flag is not None:
            sources[name] = "flag"
            return flag
        if measured is not None:
            sources[name] = "artifact"
            return measured
        sources[name] = "default"
        return default

    p50 = (tune.get("latency_ms") or {}).get("p50")
    # Waiting costs latency; a tenth of one tuned batch's median time is cheap next to the batch itself.
    measured_wait = round(min(20.0, max(1.0, 0.1 * p50)), 2) if p50 else None
    batch_tokens = pick("batch_tokens", cfg.batch_tokens, tune.get("batch_token_budget"), 4096 if cpu else 16384)
    # growth under load: a window holding k budgets' worth of items waits for all k batches anyway, and on
    # a GPU one larger batch runs more items per second than k small ones. Not on CPU by default: with one
    # intra-op thread small batches ran faster per item (MiniLM bf16, 2-core box: 6-item batches 160-183
    # items/s, 32-item 139-149), and serving with growth measured 136 vs 147 items/s without (c=32)
    grow = pick("max_batch_tokens", cfg.max_batch_tokens, None, batch_tokens if cpu else 4 * batch_tokens)
    return Settings(
        batch_tokens=batch_tokens, max_batch_tokens=max(grow, batch_tokens),
        max_batch_items=pick("max_batch_items", cfg.max_batch_items, tune.get("batch_max_items"), 256),
        max_wait_ms=pick("max_wait_ms", cfg.max_wait_ms, measured_wait, 5.0 if cpu else 2.0),
        max_padding=pick("max_padding", cfg.max_padding, None, CPU_MAX_PADDING if cpu else None),
        tokenize_workers=pick("tokenize_workers", cfg.tokenize_workers, None,
                              1 if (os.cpu_count() or 1) < 8 else 2),
        # all cores by default (torch's own default): batches pulled when the model is free are large enough
        # that one thread per core wins over leaving a core to HTTP and tokenization (docs/serve.md, threads)
        threads=pick("threads", cfg.threads, None, None),
        device=device,
        cuda_graphs=pick("cuda_graphs", cfg.cuda_graphs, None if cpu else tuned_graphs(manifest), "auto"),
        max_wait_s=pick("max_wait_s", cfg.max_wait_s,
                        default_max_wait_s(tune.get("slo_p99_ms"), cfg.request_timeout_s) if tune.get("slo_p99_ms")
                        else None, default_max_wait_s(None, cfg.request_timeout_s)),
        sources=sources,
    )


def tuned_graphs(manifest: dict[str, Any] | None) -> str | None:
    """The --cuda-graphs mode the artifact's winner was measured with (`Candidate.cuda_graphs`), where it is not
    the default."""
    cand = (manifest or {}).get("candidate")
    if not cand:
        return None
    from infertune.config import Candidate

    mode = Candidate.model_validate(cand).cuda_graphs
    return None if mode == "auto" else mode

