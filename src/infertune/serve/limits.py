"""Per-API-key rate limits (`serve --rate-limit N/s`): a token bucket per key, and the keys themselves.

Each key's bucket holds at most one second's worth of requests (N, at least 1) and refills at N per second: a
client may send a burst of N at once, then N per second. A request over it is refused with 429 and a Retry-After
of the seconds until the bucket holds one request again. Keys are never written to /metrics: the label is the
key's position in --api-key (1, 2, ...), which the server prints at start with the key's first characters.

With several frontend processes each enforces the limit on the requests it receives (connections are spread by
the kernel), so one key may reach up to frontends x N requests per second in total.
"""

from __future__ import annotations

import hmac
import math
import re
import time
from typing import Any

from infertune.errors import InfertuneError

_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
          "hour": 3600.0}


def parse_rate(text: str) -> float:
    """'20/s', '600/min', '5/m', '1000/h' -> requests per second."""
    m = re.fullmatch(r"\s*([\d.]+)\s*/\s*([a-z]+)\s*", text.lower())
    if not m or m.group(2) not in _UNITS:
        raise InfertuneError(f"--rate-limit takes N/s, N/min or N/h (requests per API key), e.g. 20/s; got {text!r}")
    try:
        n = float(m.group(1))
    except ValueError:
        raise InfertuneError(f"--rate-limit: {m.group(1)!r} is not a number") from None
    if n <= 0:
        raise InfertuneError(f"--rate-limit must be positive (N/s, N/min or N/h), got {text!r}")
    return n / _UNITS[m.group(2)]


def split_keys(value: str | list[str] | None) -> list[str]:
    """--api-key values (repeated, or comma-separated in one value or in INFERTUNE_API_KEY) -> the keys, in order,
    without duplicates."""
    items = [value] if isinstance(value, str) else list(value or [])
    keys = [k.strip() for item in items for k in item.split(",") if k.strip()]
    return list(dict.fromkeys(keys))


class TokenBucket:
    """`rate` requests per second, at most `burst` at once."""

    __slots__ = ("rate", "burst", "level", "t")

    def __init__(self, rate: float, burst: float | None = None, now: float = 0.0):
        self.rate = rate
        self.burst = max(1.0, rate if burst is None else burst)
        self.level = self.burst
        self.t = now

    def take(self, now: float) -> float:
        """Take one request: 0.0 when allowed, else the seconds until one would be (nothing is taken)."""
        self.level = min(self.burst, self.level + (now - self.t) * self.rate)
        self.t = now
        if self.level >= 1.0 - 1e-9:  # a client at exactly the rate passes despite float rounding
            self.level = max(0.0, self.level - 1.0)
            return 0.0
        return (1.0 - self.level) / self.rate


class KeyLimits:
    """One bucket per key (by its index in --api-key)."""

    def __init__(self, keys: int, rate: float, now: float = 0.0):
        self.rate = rate
        self.buckets = [TokenBucket(rate, now=now) for _ in range(keys)]

    def take(self, index: int, now: float) -> int:
        """0 when key `index` may send now, else the Retry-After in whole seconds (at least 1)."""
        wait = self.buckets[index].take(now)
        return 0 if wait <= 0 else max(1, math.ceil(wait))


def key_label(index: int) -> str:
    """The /metrics label of the key at `index` (0-based): its 1-based position in --api-key."""
    return str(index + 1)


class Access:
    """Who may call (--api-key, several keys allowed) and how often (--rate-limit, per key), for http.Gate."""

    def __init__(self, keys: list[str], rate: float | None, metrics: Any):
        self.headers = [f"Bearer {k}".encode() for k in keys]
        self.limits = KeyLimits(len(keys), rate, time.monotonic()) if rate and keys else None
        self.m = metrics
        self._kids: dict[tuple[int, str], Any] = {}

    @property
    def on(self) -> bool:
        return bool(self.headers)

    def key_index(self, authorization: bytes) -> int | None:
        """The index of the key this Authorization header carries (None: no key of ours). Every key is compared,
        in constant time each, so the answer's timing says nothing about which or how much matched."""
        found = None
        for i, h in enumerate(self.headers):
            if hmac.compare_digest(authorization, h):
                found = i
        return found

    def admit(self, index: int) -> int:
        """Count a request of key `index` against its rate: 0 admitted, else the Retry-After (s) of its 429."""
        retry = self.limits.take(index, time.monotonic()) if self.limits is not None else 0
        outcome = "rate_limited" if retry else "admitted"
        kid = self._kids.get((index, outcome))
        if kid is None:
            kid = self._kids[(index, outcome)] = self.m.key_requests.labels(key_label(index), outcome)
        kid.inc()
        if retry:
            self.m.rejected.labels("rate_limit").inc()
        return retry
