"""What `infertune validate` needs (ValidateConfig) and what it returns (ValidateResult).

Contract (read by other tools; extend, never rename): validate.json has `drills` (each `name`, `passed`,
`evidence` {figures}), `environment` and `config`. `passed` is null for a drill that was skipped, with
`reason` saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infertune.durations import Seconds, parse_duration  # noqa: F401  (one parser; this import path is kept)
from infertune.results import EnvFingerprint

FAULTS = ("kill-worker", "stall", "burst", "oom-guard", "finite-output")
Fault = Literal["kill-worker", "stall", "burst", "oom-guard", "finite-output"]
class ValidateConfig(BaseModel):
    """Everything `infertune validate` needs. Thresholds are the pass/fail rules; each drill's evidence
    repeats the threshold it was judged by."""

    model_config = ConfigDict(extra="forbid")

    target: str = Field(description="http(s) URL of a running server, or an artifact / model to serve")
    peak: float | None = Field(None, gt=0, description="peak req/s; default: found by bench's SLO search")
    slo: str = "p99_e2e_ms<=200"
    soak_s: Seconds = Field(3600.0, ge=0, description="soak duration (0 = no soak)")
    soak_fraction: float = Field(0.8, gt=0, le=2, description="soak rate as a fraction of the peak")
    soak_margin: float = Field(0.8, gt=0, le=1, description=(
        "the confirm point must meet the SLO's latency limits times this (0.8: P99 <= 160 ms for p99_e2e_ms<=200), "
        "so the soak starts with room under the SLO"))
    soak_confirm_s: Seconds | None = Field(None, ge=0, le=3600, description=(
        "before the soak, confirm its rate with a point this long and back off 10% a step until one meets "
        "the SLO; the soak runs at that rate. None: soak/4 within 5-60 s when the peak is searched, off with "
        "--peak; 0 = off"))
    long_tail: bool = True
    faults: list[Fault] = Field(default_factory=lambda: list(FAULTS))
    workload: Path | None = None
    out: Path | None = None
    api: Literal["embeddings", "completions"] | None = None  # default: from the target
    model: str | None = None  # model name in requests; default: first of GET /v1/models
    # when validate starts the server
    serve_args: list[str] = Field(default_factory=list, description="extra `infertune serve` flags")
    max_queue: int | None = Field(None, ge=1, description="--max-queue for the server validate starts")
    ready_timeout_s: Seconds = Field(600.0, gt=0)
    # pass/fail rules
    max_error_rate: float = Field(0.0, ge=0, le=1, description="soak: errors / requests allowed")
    max_rss_slope_mb_h: float = Field(100.0, ge=0, description="soak: a significant RSS climb above this fails")
    min_rss_growth_mb: float = Field(10.0, ge=0, description="soak: a climb smaller than this is not a leak")
    max_p99_drift: float = Field(1.5, gt=1, description="soak: last-third P99 / first-third P99 allowed")
    recovery_budget_s: Seconds = Field(30.0, gt=0, description="kill-worker: time to answer again")
    burst_factor: float = Field(10.0, gt=1)
    burst_s: Seconds = Field(5.0, gt=0)
    stall_s: Seconds | None = Field(None, gt=0, description="stall: SIGSTOP length (default: long enough to fill "
                                  "the queue at the peak rate)")
    # measurement
    sample_interval_s: Seconds = Field(1.0, gt=0, description="RSS and /metrics sampling period")
    windows: int = Field(20, ge=3, le=500, description="soak: P99 windows over the soak")
    search_duration_s: Seconds = Field(5.0, gt=0, description="measured seconds per SLO-search point")
    step_s: Seconds = Field(5.0, gt=0, description="measured seconds per long-tail point")
    timeout_s: Seconds = Field(30.0, gt=0, description="client timeout per request: longer is a hang")
    seed: int = 0

    @field_validator("workload")
    @classmethod
    def _exists(cls, v: Path | None) -> Path | None:
        from infertune.workloads.source import check_file

        return None if v is None else check_file(v)

    @property
    def is_url(self) -> bool:
        return self.target.startswith(("http://", "https://"))

    @property
    def confirm_s(self) -> float:
        """Seconds of the soak's confirm points (0: no confirm). Long enough for a queue to settle: a quarter
        of the soak, 5-60 s (a 2-min soak: 30 s). With --peak the user chose the rate: no confirm unless
        asked."""
        if self.soak_confirm_s is not None:
            return self.soak_confirm_s
        if self.peak is not None or self.soak_s <= 0:
            return 0.0
        return min(60.0, max(5.0, self.soak_s / 4))


LLM_POINT_S = 20.0  # a streamed completion takes seconds: a 5 s point would see few of them end


def point_s(cfg: ValidateConfig, field: str, api: str) -> float:
    """Seconds per SLO-search point (`search_duration_s`) or long-tail point (`step_s`): as given, or for a
    completions server whose flag was not given, at least LLM_POINT_S."""
    v = float(getattr(cfg, field))
    return v if api != "completions" or field in cfg.model_fields_set else max(v, LLM_POINT_S)


class Drill(BaseModel):
    name: str
    passed: bool | None = None  # None: skipped
    reason: str = ""  # the verdict in one sentence (or why it was skipped)
    evidence: dict[str, Any] = {}  # the figures that decided it, with units in the key names
    series: dict[str, Any] = {}  # time series for the plots (seconds since the drill started)
    wall_s: float = 0.0


class ValidateResult(BaseModel):
    config: dict[str, Any]
    environment: EnvFingerprint
    target: dict[str, Any] = {}  # url, started by validate or not, model, api, server limits
    peak: dict[str, Any] = {}  # rps, source (flag | slo-search), slo, search steps
    drills: list[Drill] = []
    passed: bool = False  # every drill that ran passed (the soak's latency within the SLO included)
    slo_met: bool | None = None  # the soak's latency against --slo (None: no soak)
    verdict: str = ""  # one line: PASSED / SLO NOT MET / FAILED, with what decided it
    exit_code: int = 1  # the CLI's: 0 passed, 4 only the soak's SLO missed, 1 a drill failed
    load_average: dict[str, list[float]] = {}  # os.getloadavg() at start and end: the box is shared
    started: str = ""
    wall_s: float = 0.0
    out_dir: str | None = None
    notes: list[str] = []
