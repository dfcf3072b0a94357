"""SLOs ('p99_e2e_ms<=200,p50_ttft_ms<=100') and the search for the highest load that meets them:
bracket by doubling/halving (or a smaller step), bisect (geometrically for rates) to a tolerance, then
repeat the winner; optionally confirm it with long points, backing off until one holds."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from infertune.bench.results import ConfirmResult, ConfirmStep, Point, SLOResult
from infertune.errors import InfertuneError

_TERM = re.compile(r"^\s*(p50|p90|p95|p99|p999|mean)_(e2e|ttft|itl|tpot)_ms\s*(<=|<)\s*([\d.]+)\s*$")
_ERR = re.compile(r"^\s*error_rate\s*(<=|<)\s*([\d.]+)\s*$")
# a failed point is re-checked only when it is this close to passing (SLO.marginal)
MARGINAL_KEEPUP = 0.88
MARGINAL_LATENCY = 2.0
BEHIND_MIN_REQUESTS = 2.0
_FIELD = {"e2e": "latency_ms", "ttft": "ttft_ms", "itl": "itl_ms", "tpot": "tpot_ms"}


@dataclass(frozen=True)
class Term:
    stat: str
    metric: str
    limit: float


@dataclass(frozen=True)
class SLO:
    text: str
    terms: tuple[Term, ...]
    max_error_rate: float
    # open loop: a point also fails when the server completed fewer than this share of the requests sent in
    # the window. Completions lag sends by the latency, so a shortfall of k% means latency grew by k% of the
    # window during it: a queue that grows is not a sustainable load, however good its latency so far (a
    # 4 s window at 1.1x capacity ends with p99 ~0.4 s and would pass p99<=1000). 0: off.
    keepup: float = 0.0

    @property
    def bounds(self) -> dict[str, float]:
        """Per-request limits for goodput (a request is good if it is under every bound)."""
        out: dict[str, float] = {}
        for t in self.terms:
            out[t.metric] = min(out.get(t.metric, math.inf), t.limit)
        return out

    def check(self, p: Point) -> tuple[bool, list[str]]:
        notes, ok = [], True
        if not p.valid:
            return False, [f"invalid point: {p.invalid_reason}"]
        if p.n == 0 or p.ok == 0:
            return False, ["no successful requests"]
        if self._behind(p, self.keepup):
            ok = False
            notes.append(f"fell behind: completed {p.achieved_rps:.1f} of {p.client.sent_rps:.1f} req/s sent "
                         f"(< {self.keepup:.0%}; a queue grew)")
        if p.errors.rate > self.max_error_rate:
            ok = False
            notes.append(f"error rate {p.errors.rate:.2%} > {self.max_error_rate:.2%}")
        for t in self.terms:
            val = _value(p, t)
            if val is None:
                ok = False
                notes.append(f"{t.stat}_{t.metric}_ms not measured (streaming off?)")
                continue
            good = val <= t.limit
            ok &= good
            notes.append(f"{t.stat}_{t.metric}_ms={val:.1f} {'<=' if good else '>'} {t.limit:g}")
        return ok, notes

    def marginal(self, p: Point) -> bool:
        """A failed point that is near the boundary rather than far past it: valid, errors within budget,
        kept up with at least MARGINAL_KEEPUP of sends, and every latency term within MARGINAL_LATENCY x its
        limit. On a shared host such a failure may be the host's (a few seconds of a noisy neighbour), so
        the search measures it again before believing it; a point far past the boundary (a server at 1.2x
        its capacity completes ~83% of what was sent) is not worth a second look."""
        if not p.valid or p.n == 0 or p.ok == 0 or p.errors.rate > self.max_error_rate:
            return False
        if self._behind(p, MARGINAL_KEEPUP):
            return False
        return all((v := _value(p, t)) is not None and v <= MARGINAL_LATENCY * t.limit for t in self.terms)

    def _behind(self, p: Point, share: float) -> bool:
        """Open loop with the keep-up check on: completions in the window < `share` of the sends, by at least
        BEHIND_MIN_REQUESTS. A request sent near the window's end completes after it, so a shortfall of a request
        or two is the window's edge, not a queue: with an LLM's seconds-long requests a window holds a handful
        (0.29 req/s for 8 s sent 3 and completed 2 with a TTFT of 81 ms) and 5% is less than one request."""
        sent = p.client.sent_rps
        if not (self.keepup and p.offered.rate and sent > 0 and p.achieved_rps < share * sent):
            return False
        return not p.window_s or (sent - p.achieved_rps) * p.window_s >= BEHIND_MIN_REQUESTS


def _value(p: Point, t: Term) -> float | None:
    """The point's figure for one SLO term (None when not measured, e.g. TTFT without streaming)."""
    pc = getattr(p, _FIELD[t.metric])
    return getattr(pc, t.stat) if pc is not None else None


def parse_slo(text: str, max_error_rate: float, streaming: bool, keepup: float = 0.0) -> SLO:
    terms, err = [], max_error_rate
    for part in text.split(","):
        if not part.strip():
            continue
        m, e = _TERM.match(part), _ERR.match(part)
        if e:
            err = float(e.group(2))
            continue
        if not m:
            raise InfertuneError(f"cannot read SLO term {part.strip()!r}; write e.g. 'p99_e2e_ms<=200' "
                                 "(stat p50|p90|p95|p99|p999|mean, metric e2e|ttft|itl|tpot) or 'error_rate<=0.01'")
        if m.group(2) != "e2e" and not streaming:
            raise InfertuneError(f"SLO term {part.strip()!r} needs streaming (--api completions/chat with --stream)")
        terms.append(Term(m.group(1), m.group(2), float(m.group(4))))
    if not terms:
        raise InfertuneError("--slo needs at least one latency term, e.g. 'p99_e2e_ms<=200'")
    return SLO(text, tuple(terms), err, keepup)


def search(run: Callable[[float], Point], slo: SLO, *, over: str, start: float, tolerance: float, repeats: int,
           max_steps: int = 14, floor: float | None = None, ceiling: float | None = None, recheck: bool = True,
           step: float = 2.0, log: Callable[[str], None] = lambda s: None) -> SLOResult:
    """Highest load in [floor, ceiling] whose point passes `slo`. `run(load)` measures one point.

    `step`: the bracketing factor (the load is multiplied or divided by it until a pass and a failure
    bracket the boundary). From a start far from the answer, 2 brackets in few points; from a start near
    it (e.g. the capacity measured closed-loop), a small step leaves a narrow bracket to bisect. A step
    below 2 is squared after each move that did not bracket the boundary, up to 2 (1.1, 1.21, 1.46, 2, 2,
    ...): a start that turned out far from the answer (the box slowed down after it was measured) costs a
    few more points, not the whole step budget.

    `recheck`: a marginal failure (SLO.marginal) is measured once more and the load fails only if that
    fails too. On a shared host a false failure (seconds of a noisy neighbour) is far likelier than a
    false pass, and without this one unlucky point sends the bisection down for good: the 2-core box's raw
    CPU speed swings up to 2x for seconds at a time (bf16 matmuls 224-501/s within one minute)."""
    srch = _Search(run, slo, over=over, max_steps=max_steps, floor=floor, ceiling=ceiling, recheck=recheck, step=step,
                   log=log)
    lo, hi = srch.bracket(srch.norm(start))
    res = srch.res
    if lo is None:
        res.bracket = [None, hi]
        return res
    lo, hi = srch.bisect(lo, hi, tolerance)
    lo, hi, confirmed = srch.confirm_boundary(lo, hi, repeats, tolerance)
    res.repeats = repeats
    res.bracket = [lo, hi]
    res.met = confirmed
    res.max_load = lo if confirmed else None
    srch.note_noise()
    return res


class _Search:
    """One search's state: the loads measured with their verdicts, the step count and the bracketing factor."""

    def __init__(self, run: Callable[[float], Point], slo: SLO, *, over: str, max_steps: int, floor: float | None,
                 ceiling: float | None, recheck: bool, step: float, log: Callable[[str], None]) -> None:
        self.run, self.slo, self.over, self.max_steps, self.recheck, self.log = run, slo, over, max_steps, recheck, log
        self.integer = over == "concurrency"
        self.floor = floor if floor is not None else (1 if self.integer else 0.1)
        self.ceiling = ceiling if ceiling is not None else (4096 if self.integer else 1e6)
        self.res = SLOResult(target=slo.text, over=over)
        self.steps = 0
        self.seen: list[tuple[float, bool]] = []
        self.f = step

    def measure(self, load: float, again: bool = False) -> bool:
        """Run one point at `load` and judge it; a marginal failure is measured once more (`recheck`)."""
        self.steps += 1
        p = self.run(load)
        ok, notes = self.slo.check(p)
        self.seen.append((load, ok))
        p.slo_pass, p.slo_detail = ok, notes
        line = f"{self.over}={_fmt(load, self.integer)}: {'pass' if ok else 'FAIL'} ({'; '.join(notes)})"
        if again:
            line += " [re-check of a marginal failure]"
        self.res.steps.append(line)
        self.log(line)
        if not ok and self.recheck and not again and self.steps < self.max_steps + 4 and self.slo.marginal(p):
            self.res.rechecks += 1
            return self.measure(load, again=True)
        return ok

    def norm(self, x: float) -> float:
        return float(max(self.floor, min(self.ceiling, round(x) if self.integer else x)))

    def up(self, x: float) -> float:  # the next load above x (integers move by at least 1)
        y = self.norm(x * self.f)
        return self.norm(x + 1) if self.integer and y <= x else y

    def down(self, x: float) -> float:
        y = self.norm(x / self.f)
        return self.norm(x - 1) if self.integer and y >= x else y

    def widen(self) -> None:
        if self.f < 2:
            self.f = min(2.0, self.f * self.f)

    def bracket(self, x: float) -> tuple[float | None, float | None]:
        """(highest load passed, lowest failed) from `x`, moving up while points pass or down while they fail."""
        lo: float | None = None
        hi: float | None = None
        if self.measure(x):
            lo = x
            while self.steps < self.max_steps and lo < self.ceiling:
                x = self.up(lo)
                if self.measure(x):
                    lo = x
                    self.widen()
                else:
                    hi = x
                    break
        else:
            hi = x
            while self.steps < self.max_steps and hi > self.floor:
                x = self.down(hi)
                if x >= hi:
                    break
                if self.measure(x):
                    lo = x
                    break
                hi = x
                self.widen()
        return lo, hi

    def bisect(self, lo: float, hi: float | None, tolerance: float) -> tuple[float, float | None]:
        """Narrow [lo, hi] (geometric midpoints; integers by halves) to within `tolerance` or the step budget."""
        while hi is not None and self.steps < self.max_steps:
            if (self.integer and hi - lo <= 1) or (not self.integer and hi / lo <= 1 + tolerance):
                break
            mid = self.norm(math.sqrt(lo * hi)) if not self.integer else self.norm((lo + hi) / 2)
            if mid in (lo, hi):
                break
            if self.measure(mid):
                lo = mid
            else:
                hi = mid
        return lo, hi

    def confirm_boundary(self, lo: float, hi: float | None, repeats: int,
                         tolerance: float) -> tuple[float, float | None, bool]:
        """Repeats at the boundary: every repeat must pass, else step down and repeat there. Near the knee a
        short window's P99 is bimodal on a noisy box (a queue forms or it does not), so one failed
        confirmation is no reason to give up: step down (up to 4 times) until a load passes every repeat."""
        need = max(0, repeats - 1)  # lo already passed once during the bisection
        for _ in range(5):
            if all(self.measure(lo) for _ in range(need)):
                return lo, hi, True
            hi = lo
            nxt = self.norm(lo - 1) if self.integer else self.norm(lo / (1 + tolerance))
            if nxt >= hi:
                break
            lo, need = nxt, repeats
        return lo, hi, False

    def note_noise(self) -> None:
        """Name the loads that failed below one that passed: a boundary a repeat of the search may not find."""
        top_pass = max((x for x, ok in self.seen if ok), default=None)
        bad = sorted({x for x, ok in self.seen if not ok and top_pass is not None and x <= top_pass})
        if bad:
            self.res.contradicted = bad
            self.res.noise_note = (
                f"noisy boundary: {self.over} {', '.join(_fmt(x, self.integer) for x in bad)} failed although "
                f"{_fmt(top_pass, self.integer)} passed once. A repeat of this search may land elsewhere: "
                "lengthen --duration, or set the SLO where latency is bound by capacity rather than by "
                "the host's hiccups (docs/bench.md)")
            self.log(self.res.noise_note)


def confirm(run: Callable[[float], Point], slo: SLO, *, start: float, duration: float, over: str = "rate",
            backoff: float = 0.9, max_steps: int = 6, floor: float | None = None,
            log: Callable[[str], None] = lambda s: None) -> ConfirmResult:
    """The highest load from `start` down, in steps of `backoff`, whose long point (`run(load)`, `duration`
    s) meets `slo`; at most `max_steps` points.

    Why: a search's short points end before the queue settles, and a soak at 80% of their peak can run far over
    the SLO (docs/bench.md, a load that holds). A point that fell behind (completions below the keep-up share of sends)
    also bounds the server's capacity by its completions/s, so the next load is at most `backoff` x that:
    one step to near capacity instead of several 10% steps, each as long as `duration`."""
    integer = over == "concurrency"
    floor = floor if floor is not None else (1 if integer else 0.1)
    res = ConfirmResult(duration_s=duration, start=start, backoff=backoff)
    x = float(max(floor, round(start) if integer else start))
    for _ in range(max_steps):
        p = run(x)
        ok, notes = slo.check(p)
        p.slo_pass, p.slo_detail = ok, notes
        res.steps.append(ConfirmStep(load=x, passed=ok, window_s=p.window_s, p50_ms=p.latency_ms.p50,
                                     p99_ms=p.latency_ms.p99, achieved_rps=p.achieved_rps,
                                     sent_rps=p.client.sent_rps, error_rate=p.errors.rate, notes=notes))
        verdict = "pass" if ok else "FAIL"
        log(f"confirm {over}={_fmt(x, integer)} over {duration:g} s: {verdict} ({'; '.join(notes)})")
        if ok:
            res.load, res.met = x, True
            return res
        nxt = x * backoff
        if not integer and slo._behind(p, slo.keepup) and p.achieved_rps > 0:
            nxt = min(nxt, p.achieved_rps * backoff)
        nxt = float(math.floor(nxt)) if integer else nxt
        if nxt < floor or nxt >= x:
            break
        x = nxt
    return res


def _fmt(x: float, integer: bool) -> str:
    return f"{int(x)}" if integer else f"{x:.3g}"
