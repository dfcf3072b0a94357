"""Configs and results of `doctor` and `doctor explain`.

Contract (extend, never rename): `doctor --json` has `findings` (each `check`, `level`, `message`, `fix`);
`doctor explain --json` has `matches` (each `id`, `cause`, `fix`, `line`, `source`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Level = Literal["ok", "warning", "error"]
LEVEL_RANK = {"ok": 0, "warning": 1, "error": 2}
EXIT_CODES = {"ok": 0, "warning": 1, "error": 3}  # 2 stays reserved for user mistakes (InfertuneError)


class DoctorConfig(BaseModel):
    """What to probe. The torch probe runs in a subprocess (initialising CUDA has side effects)."""

    probe_torch: bool = True
    probe_timeout_s: float = Field(60.0, gt=0)
    use_nvml: bool = True  # nvidia-ml-py when installed; nvidia-smi parsing otherwise


class Finding(BaseModel):
    check: str  # short stable name, e.g. "driver", "torch-arch"
    level: Level
    message: str
    fix: str = ""
    data: dict[str, Any] = {}


class DoctorReport(BaseModel):
    findings: list[Finding] = []
    worst: Level = "ok"
    exit_code: int = 0
    facts: dict[str, Any] = {}  # everything probed, raw-ish, for bug reports


class ExplainConfig(BaseModel):
    text: str
    source: str = "-"
    max_matches: int = Field(10, gt=0)


class ExplainMatch(BaseModel):
    id: str
    title: str
    cause: str
    fix: str
    line: str  # the first log line that matched
    line_no: int  # 1-based
    hits: int  # lines that matched this signature
    confidence: Literal["high", "low"]
    details: dict[str, str] = {}  # named groups captured from the line
    source: str  # first source link
    sources: list[str] = []


class ExplainResult(BaseModel):
    matches: list[ExplainMatch] = []
    lines_checked: int = 0
    signatures: int = 0
    message: str = ""
