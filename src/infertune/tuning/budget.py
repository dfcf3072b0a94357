"""The run's time budget, cut into stage shares. Every stage asks how much is left of its share and
scales itself (rounds, probe caps, how many options it starts); the shares are cumulative fractions of
the budget, so a stage that finishes early leaves its time to the next."""

from __future__ import annotations

import time

# cumulative share of the budget at which each stage must end
SHARES = {"probe": 0.55, "refine": 0.68, "full": 0.82, "confirm": 0.93}


class Budget:
    def __init__(self, total_s: float, start: float | None = None, shares: dict[str, float] | None = None):
        self.total_s = float(total_s)
        self.start = time.monotonic() if start is None else start
        self.shares = shares or SHARES

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def stage_left(self, stage: str) -> float:
        """Seconds until `stage`'s share of the budget ends (negative when it is over)."""
        return self.shares[stage] * self.total_s - self.elapsed()

    def tail_s(self) -> float:
        """Seconds after the last stage's share: the artifact and the report."""
        return (1.0 - max(self.shares.values())) * self.total_s
