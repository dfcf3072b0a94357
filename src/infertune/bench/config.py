"""Plain-data config of `infertune bench`: where to send load, what to send, and how much."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from infertune.durations import Seconds

Api = Literal["embeddings", "completions", "chat"]


class BenchConfig(BaseModel):
    """Everything `infertune bench` needs. Exactly one load profile applies, in this order: `slo` (search),
    `sweep`, `rates`, `concurrency`; with none given, concurrency 1."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    api: Api = "embeddings"
    model: str | None = Field(None, description="model name sent in requests; default: first of GET /v1/models")
    workload: Path | None = Field(None, description="JSONL: {input} (embeddings) or {prompt|messages, max_tokens}")
    synthetic: str | None = Field(None, description="e.g. 'prompt=lognormal(200,0.6),output=128'")
    inputs_per_request: int = Field(1, ge=1, le=2048, description="embeddings: inputs packed into each request")
    ceiling: str | None = Field(None, description=(
        "embeddings: the forward-only ceiling to hold the server against, a `serve --ceiling --json` file or items/s; "
        "each point reports its served items/s as a fraction of it (of_ceiling)"))
    stream: bool | None = Field(None, description="stream completions/chat (default: yes, to measure TTFT/ITL)")
    # load profile
    concurrency: list[int] = Field(default_factory=list)
    rates: list[float] = Field(default_factory=list, description="requests/s, open loop")
    arrivals: Literal["constant", "poisson"] = "constant"
    sweep: bool = False
    sweep_points: int = Field(6, ge=3, le=30)
    sweep_max_concurrency: int = Field(64, ge=2)
    slo: str | None = Field(None, description="e.g. 'p99_e2e_ms<=200' or 'p99_ttft_ms<=500,p50_itl_ms<=50'")
    slo_over: Literal["rate", "concurrency"] = "rate"
    slo_repeats: int = Field(2, ge=1, le=5, description="runs of the final candidate; all must pass")
    slo_tolerance: float = Field(0.05, gt=0, lt=1, description="stop bisecting when hi/lo <= 1 + tolerance")
    slo_start: float | None = Field(None, gt=0, description=(
        "the first load the search measures; default: the one-at-a-time rate (measured first) for a rate "
        "search, 1 for concurrency"))
    slo_step: float = Field(2.0, gt=1, le=16, description=(
        "bracketing factor: the load is multiplied (or divided) by this until a pass and a failure bracket "
        "the SLO boundary; with a --slo-start near the answer (e.g. the capacity measured at high "
        "concurrency) a small step such as 1.1 leaves a narrow bracket and saves points. A step below 2 is "
        "squared after each move that does not bracket the boundary, up to 2"))
    slo_keepup: float = Field(0.95, ge=0, le=1, description=(
        "rate search: a point also fails if completions in its window are below this share of sends (the "
        "server fell behind and a queue grew); 0 turns the check off"))
    slo_recheck: bool = Field(True, description=(
        "search: measure a marginal failure once more before believing it (shared hosts fail points by luck)"))
    slo_confirm: Seconds = Field(0.0, ge=0, le=3600, description=(
        "after the search: re-measure its answer with points this long (the queue settles) and back off "
        "until one meets the SLO, reported as slo.sustainable_load beside the short points' max_load; "
        "0 = off"))
    slo_confirm_fraction: float = Field(1.0, gt=0, le=1, description=(
        "the confirm stage starts at this fraction of the search's answer"))
    slo_confirm_backoff: float = Field(0.9, gt=0, lt=1, description=(
        "after a failed long point the next is at most this fraction of it (lower when the point fell "
        "behind: its completions/s bound what the server can do)"))
    max_error_rate: float = Field(0.01, ge=0, le=1, description=(
        "a point with a larger share of failed requests is error-laden: not valid, never quoted, fails any "
        "SLO (an SLO term error_rate<=x sets it for a search)"))
    wait_ready: Seconds | None = Field(None, ge=0, le=3600, description=(
        "before the first point, wait this long for a server that refuses connections or answers 503 "
        "(loading); default: 120 s for 503, 5 s for refused connections; 0 = do not wait"))
    # bounds
    duration: Seconds = Field(10.0, gt=0, le=3600, description="measured seconds per point (after warm-up)")
    warmup: Seconds = Field(2.0, ge=0, le=600, description="seconds per point whose requests are not counted")
    max_requests: int | None = Field(None, gt=0, description="cap on requests scheduled per point")
    timeout: Seconds = Field(60.0, gt=0, description="per-request timeout (s)")
    seed: int = 0
    # client
    workers: int | Literal["auto"] = "auto"
    http_client: Literal["auto", "lean", "aiohttp"] = Field(
        "auto", description="auto: the lean httptools client for non-streamed requests, aiohttp for streams")
    max_connections: int = Field(1024, ge=1, description="requests in flight per worker process (rate mode)")
    max_lag_ms: float = Field(10.0, gt=0, description="p99 schedule lag above this marks a point invalid")
    max_client_cpu: float = Field(0.95, gt=0, le=1,
                                  description="client CPU share of one core that marks a point invalid")
    # outputs
    metrics_url: str | None = Field(None, description="Prometheus endpoint; default URL/metrics ('' = off)")
    scrape_interval: float = Field(1.0, gt=0)
    out: Path | None = None
    save_requests: bool = False

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        from infertune.errors import InfertuneError

        v = v.strip().rstrip("/")
        if not v.startswith(("http://", "https://")):
            raise InfertuneError(f"URL must start with http:// or https://, got {v!r}")
        for suffix in ("/v1/embeddings", "/v1/completions", "/v1/chat/completions", "/v1"):
            if v.endswith(suffix):
                v = v[: -len(suffix)]
                break
        return v

    @field_validator("workload")
    @classmethod
    def _exists(cls, v: Path | None) -> Path | None:
        from infertune.workloads.source import check_file

        return None if v is None else check_file(v)

    @model_validator(mode="after")
    def _check(self) -> BenchConfig:
        from infertune.errors import InfertuneError

        if self.workload and self.synthetic:
            raise InfertuneError("give --workload or --synthetic, not both")
        if any(c < 1 for c in self.concurrency):
            raise InfertuneError("--concurrency values must be >= 1")
        if any(r <= 0 for r in self.rates):
            raise InfertuneError("--rate values must be > 0 requests/s")
        if self.http_client == "lean":
            try:
                import httptools  # noqa: F401
            except ImportError:
                raise InfertuneError("--http-client lean needs httptools: pip install httptools "
                                     "(or pick --http-client aiohttp)") from None
            if self.streaming:
                raise InfertuneError("--http-client lean sends non-streamed requests only; streams use aiohttp "
                                     "(pass --no-stream, or --http-client auto)")
        if isinstance(self.workers, int) and self.workers < 1:
            raise InfertuneError("--workers must be >= 1 or 'auto'")
        return self

    @property
    def streaming(self) -> bool:
        return self.api != "embeddings" and (self.stream is None or self.stream)

    @property
    def endpoint(self) -> str:
        return {"embeddings": "/v1/embeddings", "completions": "/v1/completions",
                "chat": "/v1/chat/completions"}[self.api]
