"""The run's time budget, cut into stage shares. Every stage asks how much is left of its share and
scales itself (rounds, probe caps, how many options it starts); the shares are cumulative fractions of
the budget, so a stage that finishes early leaves its time to the next. A late pass (options skipped for
time, tried when the stages left time unused: tuning.driver) re-cuts the shares from what is actually left."""

from __future__ import annotations

import time

# cumulative share of the budget at which each stage must end
SHARES = {"probe": 0.55, "refine": 0.68, "full": 0.82, "confirm": 0.93}
# a run may skip an option for time only once it has used this much of its budget (tuning.driver's late pass)
USED_BEFORE_SKIP = 0.8
# the most of the budget a measured tail estimate may keep from the stages (a slow reference must not starve them)
MAX_TAIL_SHARE = 0.25


class Budget:
    def __init__(self, total_s: float, start: float | None = None, shares: dict[str, float] | None = None):
        self.total_s = float(total_s)
        self.start = time.monotonic() if start is None else start
        self.shares = dict(shares or SHARES)
        self.tail_est_s = 0.0  # what the task expects the artifact step to take here, once it has measured a speed

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def stage_left(self, stage: str) -> float:
        """Seconds until `stage`'s share of the budget ends (negative when it is over); no stage runs into the tail."""
        return min(self.shares[stage] * self.total_s, self.total_s - self.tail_s()) - self.elapsed()

    def tail_s(self) -> float:
        """Seconds kept after the stages for the artifact and the report: the last stage's share of what is left, or
        the task's estimate from what this host measured where that is more (at most MAX_TAIL_SHARE). On a 2-core
        box the artifact's speed passes over long held texts took 96 s of a 150 s budget, against 10 s kept."""
        share = (1.0 - max(self.shares.values())) * self.total_s
        return max(share, min(self.tail_est_s, MAX_TAIL_SHARE * self.total_s))

    def may_skip(self) -> bool:
        """Whether an option may still be skipped for time: the run has used USED_BEFORE_SKIP of its budget."""
        return self.elapsed() >= USED_BEFORE_SKIP * self.total_s

    def recut(self) -> None:
        """Re-cut every stage's share from now to the end of the last one, in the stages' own proportions (a
        late pass runs the stages again on what the first pass left)."""
        names = sorted(self.shares, key=self.shares.__getitem__)
        now, end = self.elapsed() / self.total_s, self.shares[names[-1]]
        if now >= end:
            self.shares = {k: now for k in names}
            return
        scale = (end - now) / end
        self.shares = {k: now + self.shares[k] * scale for k in names}
