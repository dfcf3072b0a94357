"""One request as the load generators saw it: the record every bench and validate figure is computed from."""

from __future__ import annotations

from typing import NamedTuple


class Record(NamedTuple):
    """Times are time.monotonic() seconds; a figure not seen (no first token) is NaN."""

    sched: float  # when the schedule said to send it
    sent: float  # when it was sent (sent - sched: how far the client fell behind)
    first: float  # first content (streamed answers; NaN otherwise)
    done: float  # when the answer, or the error, was complete
    error: str  # "" for an answer, else its kind (http_5xx, timeout, non_json, ...)
    detail: str  # the error's message; for an answer "usage" when the server counted its tokens
    out_tokens: int
    in_tokens: int
    chunk_times: list[float] | None  # arrival of each streamed chunk (None: not streamed)
