"""What a model family tells the search loop. The loop owns order, isolation, time and the record;
the task owns what a candidate is, how it is prepared, probed, verified and measured, and what "faster"
means for it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infertune.results import Accuracy, CandidateResult, TuneResult


@dataclass(frozen=True)
class Option:
    """An engine the task could run here, and why: `why` is what it is good at on this host, `needs`
    the capabilities it requires (infertune.hardware.needs), `prior` its expected speed relative to the
    reference (orders the search: the time budget cuts the tail, not the promising head)."""

    candidate: Any  # a frozen candidate with .id and .engine_id
    why: str
    prior: float = 1.0
    needs: tuple[str, ...] = ()
    role: str = "candidate"  # reference | baseline | candidate
    probe_s: float | None = None  # probe time cap for engines with a long first run (compile, graphs)
    skip: str | None = None  # why the task chose not to try it here (a measurement says it cannot pay): one sentence


@dataclass
class Probe:
    """A short measurement: `speed` in the task's unit, and whatever the task needs to refine it. `warm_s`: the
    seconds of the call's warm-up (where a compiled engine compiles, a graph engine captures), which the search
    charges to the candidate's "prepare" stage on its first probe."""

    speed: float
    p99_ms: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    warm_s: float = 0.0


class Task:
    kind = "base"
    unit = "items/s"
    baseline_eligible = False  # may the naive baseline itself win (when it is also a servable engine)?
    baseline_label = "the naive baseline"  # what the ratios are against, in the decision's words
    measured_how = "interleaved"  # how the candidates' timed passes were ordered
    stage_shares: dict[str, float] | None = None  # cumulative budget shares per stage (None: tuning.budget.SHARES)
    # set by the search around a call (probe): the most seconds the task's worker call may take, or None
    call_limit_s: float | None = None
    quick_confirm = True  # do the leaders get confirmation passes under --quick?
    # every option is its own server, whose start, verification and probe cost minutes: a late pass starts one only
    # when what the quickest of them took on this host is left (tuning.search._no_time)
    measured_starts = False

    def __init__(self, cfg, console):
        self.cfg, self.console = cfg, console

    # --- setup ---------------------------------------------------------------------------------
    def load(self, out: Path) -> TuneResult:
        """Load tokenizer and workload; return the TuneResult skeleton (model, workload, config...)."""
        raise NotImplementedError

    def default_budget_s(self) -> float:
        raise NotImplementedError

    def options(self, caps) -> list[Option]:
        raise NotImplementedError

    def matches(self, cand, filters: list[str] | None) -> bool:
        return not filters or any(cand.id.endswith(f[:-1]) if f.endswith("$") else f in cand.id for f in filters)

    def baseline_id(self) -> str | None:
        """The candidate speedups are measured against, when it is not an option of role "baseline"."""
        return None

    def available(self, cand) -> str | None:
        """Software availability (installed, device support): None or one sentence."""
        return None

    # --- per engine ----------------------------------------------------------------------------
    def job(self, cand) -> dict[str, Any]:
        raise NotImplementedError

    def worker(self, cand, timeout_s: float):
        """The handle the loop calls (ready, call, stop, kill): a worker process running `job(cand)`, or the
        task's own (a served causal LM: an HTTP server it started)."""
        from infertune.tuning.worker import Worker

        return Worker(self.job(cand), timeout_s)

    def probe(self, worker, cand, cap_s: float) -> Probe:
        raise NotImplementedError

    def verify(self, worker, cand) -> tuple[Accuracy, bool, str]:
        """The first call verifies the reference against itself and keeps its outputs."""
        raise NotImplementedError

    def refine(self, run, cand, probe: Probe, share_s: float) -> list:
        """Variants of a verified engine worth full rounds (embeddings: the token budget that meets the
        SLO). Default: the candidate itself."""
        return [cand]

    def extra_options(self, run) -> list[Option]:
        """Options that depend on what the probes found (embeddings: mixed precision)."""
        return []

    def measure(self, worker, cand, max_s: float | None = None) -> dict[str, Any]:
        """One timed sample for the full rounds; `max_s` cuts it short when the budget is tight."""
        raise NotImplementedError

    def pass_s(self, run, cand) -> float:
        """Expected seconds of one `measure` call (to fit rounds into the budget)."""
        raise NotImplementedError

    def summarize(self, run, cand, samples: list[dict[str, Any]]) -> dict[str, Any]:
        """CandidateResult fields from the timed samples."""
        raise NotImplementedError

    # --- decision ------------------------------------------------------------------------------
    def speed(self, r: CandidateResult) -> float:
        raise NotImplementedError

    def measured(self, r: CandidateResult) -> bool:
        """Whether full rounds produced a figure (a served LM that met its SLO at no rate has speed 0 and was
        measured all the same)."""
        return bool(self.speed(r))

    def slo(self, r: CandidateResult) -> tuple[float | None, float | None]:
        """(the figure checked, the limit); (None, None) when the task has no latency SLO."""
        return None, None

    def rank(self, r: CandidateResult) -> int:
        """Simplicity, as the registry declares it (infertune.catalog): at equal speed an unquantized candidate
        beats any quantized one (no calibration to redo, answers kept; docs/architecture.md, ties), then the
        engine with fewer moving parts (lower is simpler).
        A family whose engines are not in the registry overrides this."""
        from infertune.registry import simplicity

        return simplicity(str(r.candidate.get("backend", "")), r.candidate.get("quant"))

    def simpler_because(self, win: CandidateResult, other: CandidateResult) -> str:
        """Why `win` (lower rank) beat the faster `other` inside the tie margin, in words."""
        return f"the simpler engine ({win.candidate.get('backend')})"

    def slo_flags(self, fig: float, limit: float) -> str:
        """The flag that would admit a candidate whose SLO figure is `fig`."""
        return f"--slo-p99-ms {ceil_flag(fig):g}"

    def describe_winner(self, r: CandidateResult) -> str:
        return f"Winner: {r.name} at {self.speed(r):.1f} {self.unit}."

    def constraints(self) -> str:
        """The constraints in words, for the no-winner sentence."""
        return "the accuracy budget"

    def accuracy_flags(self, r: CandidateResult) -> str:
        """CLI flags that would admit `r`'s accuracy."""
        return ""

    def compare_with_plan(self, result: TuneResult) -> None:
        """After the decision: record plan's prediction for this host beside the winner's measurement."""

    def tail_estimate_s(self, speed: float) -> float:
        """Seconds the artifact step is expected to take on this host, given the reference's probed speed (in the
        task's unit); 0: the budget's own tail share is enough."""
        return 0.0

    def save_artifact(self, run, result: TuneResult, out: Path) -> None:
        pass

    def write_report(self, result: TuneResult, path: Path) -> None:
        pass


def ceil_flag(x: float) -> float:
    """A round limit just above x (two significant figures, rounded up)."""
    if x <= 0:
        return x
    mag = 10 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x * 1.05 / mag) * mag
