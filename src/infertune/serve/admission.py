"""Admission by expected wait: the arithmetic, free of I/O (the engine client feeds it, the unit tests feed it
made-up clocks).

Per engine, the client knows the tokens it sent and has not had back (`outstanding`: queued and in the engine's
hands) and how fast the engine gave rows back: an exponentially weighted average of tokens finished per second
of *busy* time (time with work outstanding; idle time says nothing about speed). A new request is expected to
wait `outstanding / rate` seconds before its own rows start; over its deadline it is refused at once (429 with
Retry-After) instead of queueing behind work it cannot outwait.

At low load that average measures latency, not speed (one 20-token request in 30 ms reads 700 tokens/s from an
engine that runs 5,000 in full batches), and a burst arriving then would be refused for a wait it would not have.
So the rate divided by is the larger of the average and the best average seen lately (`capacity`, which fades
with 20 s of busy time: a host that got slower is believed within half a minute of work), and an estimate is used
only after TAU_S seconds of busy time in all (the first answers after a start are slow: a cold start's one
answer would refuse the first burst the same way).

While an engine finishes nothing, the rate is not frozen at its last value: past the usual gap between answers it
decays with the same time constant, so a stalled engine's expected wait grows and new requests are refused
within a few seconds, not after the queue fills. With work outstanding and nothing finished for longer than a
request's deadline (and than `stall_s`: a batch that takes longer than a short deadline is running, not stalled),
the engine is stalled for that request: refused at once (503), never slow. Requests already admitted run to
completion: the client cannot tell a stopped engine from one long batch (one 12 s batch of a slow model is
quiet for 12 s too); a stopped engine process is killed after --worker-timeout-s and its requests fail then.
"""

from __future__ import annotations

import math

# The rate's time constant, in seconds of busy time: long enough to average over many batches (a CPU batch of
# MiniLM runs 10-300 ms on the 2-core box), short enough that a stall shows within a few seconds.
TAU_S = 2.0
# How long the best rate seen is remembered, in seconds of busy time. Idle time does not fade it; busy time at a
# lower rate does: with a minute, a validate stall drill on a shared 2-core box (load average 8) admitted work
# expected to take 10 s that took about 20 (the host had got slower since the rate was seen).
CAPACITY_TAU_S = 20.0
# An engine is stalled when it finished nothing for twice its usual time between answers, and at least this long:
# a batch may take hundreds of ms on a CPU (16 texts of 70 tokens: 0.3 s for MiniLM on the 2-core box).
STALL_MIN_S = 1.0
# The usual gap between answers is averaged per answer with this weight (the last ~5 answers count).
GAP_WEIGHT = 0.2


class ServiceRate:
    """One engine's service rate (tokens/s, an EWMA over busy time) and the work outstanding on it."""

    def __init__(self, tau_s: float = TAU_S):
        self.tau = tau_s
        self.rate: float | None = None  # tokens per busy second; None until the first answer
        self.busy_total = 0.0  # busy seconds the rate has seen
        self.capacity: float | None = None  # the best `rate` seen, fading with busy time
        self.gap: float | None = None  # EWMA of busy seconds between answers (a batch's time, about)
        self.outstanding = 0  # tokens sent and not answered
        self.t: float | None = None  # the busy clock's last reading: an answer, or the start of a busy spell
        self.busy_since: float | None = None
        self.last_done: float | None = None  # when rows last came back (or the engine said it made progress)

    def sent(self, tokens: int, now: float) -> None:
        if self.outstanding <= 0:
            self.busy_since = self.t = now  # idle time does not count
        self.outstanding += tokens

    def finished(self, tokens: int, now: float) -> None:
        """`tokens` came back (rows answered) at `now`."""
        if self.t is not None and now > self.t and tokens > 0:
            g = now - self.t
            a = math.exp(-g / self.tau)
            sample = tokens / g
            self.rate = sample if self.rate is None else a * self.rate + (1 - a) * sample
            self.busy_total += g
            faded = (self.capacity or 0.0) * math.exp(-g / CAPACITY_TAU_S)
            self.capacity = max(self.rate, faded)
            # per answer, not per second: one long silence (a stall) must not become "the usual gap" for long
            self.gap = g if self.gap is None else (1 - GAP_WEIGHT) * self.gap + GAP_WEIGHT * g
            self.t = now
        self.last_done = now
        self.dropped(tokens, now)

    def dropped(self, tokens: int, now: float) -> None:
        """`tokens` will not come back (timed out, failed): no longer outstanding, and no speed learned."""
        self.outstanding = max(0, self.outstanding - tokens)
        if self.outstanding == 0:
            self.busy_since = None

    def progress(self, now: float) -> None:
        """The engine said it is working (a heartbeat while it runs other clients' rows): not stalled."""
        self.last_done = now

    def current(self, now: float) -> float | None:
        """The rate now: the larger of the average and the capacity, decayed for the part of the current silence
        beyond the usual gap."""
        if self.rate is None:
            return None
        best = max(self.rate, self.capacity or 0.0)
        if self.outstanding <= 0 or self.t is None:
            return best
        over = now - self.t - (self.gap or 0.0)
        return best * math.exp(-over / self.tau) if over > 0 else best

    def expected_wait(self, now: float) -> float | None:
        """Seconds the work outstanding is expected to take (None: less than TAU_S of busy time measured, so no
        estimate)."""
        if self.outstanding <= 0:
            return 0.0
        r = self.current(now)
        if r is None or self.busy_total < self.tau:
            return None
        return math.inf if r <= 0 else self.outstanding / r

    def stall_s(self) -> float:
        """Silence longer than this is a stall: twice the usual gap between answers, at least STALL_MIN_S."""
        return max(STALL_MIN_S, 2 * (self.gap or 0.0))

    def silent_for(self, now: float) -> float:
        """Seconds with work outstanding and nothing finished (0 when idle)."""
        if self.outstanding <= 0 or self.busy_since is None:
            return 0.0
        return now - max(self.busy_since, self.last_done or self.busy_since)


class Verdict:
    """What admission says about a new request: admit, or refuse with a reason and a Retry-After."""

    __slots__ = ("admit", "reason", "wait_s", "retry_after_s", "message")

    def __init__(self, admit: bool, reason: str = "", wait_s: float | None = None, retry_after_s: int = 1,
                 message: str = ""):
        self.admit, self.reason, self.wait_s, self.retry_after_s, self.message = (admit, reason, wait_s,
                                                                                  retry_after_s, message)


def judge(rates: list[ServiceRate], deadline_s: float, now: float) -> Verdict:
    """Admit or refuse a request with this deadline, given the engines it may go to (the live ones)."""
    if not rates:
        return Verdict(True)
    quiet = [r.silent_for(now) for r in rates]
    idle = min(quiet)
    if all(q > max(deadline_s, r.stall_s()) for q, r in zip(quiet, rates, strict=True)):
        return Verdict(False, "engine_stalled", None, 1,
                       f"the model engine stalled: work is queued and no rows finished for {idle:.1f} s, longer "
                       f"than this request's deadline ({deadline_s:g} s); retry later or elsewhere")
    waits = [w for w in (r.expected_wait(now) for r in rates) if w is not None]
    if len(waits) < len(rates):  # an engine with no estimate yet: nothing says the request would wait
        return Verdict(True, wait_s=min(waits, default=None))
    wait = min(waits)
    if wait <= deadline_s:
        return Verdict(True, wait_s=wait)
    # the queue drains at the measured rate: in (wait - deadline) s a new request would be expected to fit
    retry = 1 if math.isinf(wait) else max(1, math.ceil(wait - deadline_s))
    shown = "no rows finishing" if math.isinf(wait) else f"{wait:.1f} s"
    return Verdict(False, "expected_wait", wait, min(retry, 3600),
                   f"server is overloaded: the work queued ahead of this request is expected to take {shown}, "
                   f"longer than its deadline ({deadline_s:g} s, --max-wait-s or the X-Infertune-Deadline-Ms "
                   f"header); retry after {retry} s")


def default_max_wait_s(slo_p99_ms: float | None, request_timeout_s: float) -> float:
    """--max-wait-s when not given: ten times the artifact's P99 SLO (a request expected to wait ten SLOs before its
    batch starts has missed it by far; refused at once, its client can retry elsewhere), at least 1 s (Retry-After
    counts whole seconds), and 10 s without an SLO; never more than the request timeout, which ends it anyway."""
    base = max(1.0, 10 * slo_p99_ms / 1e3) if slo_p99_ms else 10.0
    return round(min(base, request_timeout_s), 3)
