"""What can go wrong with an admitted request inside the serving stack, as domain errors.

The batch core and the engine client raise these; they know nothing of HTTP. `http.py` alone turns them
into status codes (`http.api_error`). Between processes an error travels as (kind, message) and is
rebuilt on the other side (`to_wire` / `from_wire`).
"""

from __future__ import annotations


class ServeError(Exception):
    """A request could not be answered; `message` says why and what the client can do."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class Overloaded(ServeError):
    """Admission refused the request at once, before any work: the queue is full (`reason` "queue_full") or the
    work ahead of it is expected to take longer than its deadline ("expected_wait"). `retry_after_s`: when a retry
    is expected to be admitted."""

    def __init__(self, message: str, reason: str = "queue_full", retry_after_s: int = 1):
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class EngineStalled(ServeError):
    """The engine holding the work finished nothing for longer than the request's deadline: refused at once."""

    reason = "engine_stalled"


class InputTooLong(ServeError):
    """An input has more tokens than the model takes (and the server does not truncate)."""


class EngineDown(ServeError):
    """The engine holding the request died, stalled or is restarting: the request may be retried."""


class BatchFailed(ServeError):
    """The forward pass of the batch holding the request raised; the engine goes on."""


class TimedOut(ServeError):
    """The request took longer than the server's request timeout."""


class NonFinite(ServeError):
    """The engine returned NaN or Inf in a row of the request: never answered, counted in /metrics."""


KINDS = {c.__name__: c for c in (Overloaded, InputTooLong, EngineDown, BatchFailed, TimedOut, NonFinite,
                                 EngineStalled)}
Wire = tuple[str, str]  # (kind, message)


def to_wire(e: ServeError) -> Wire:
    return type(e).__name__, e.message


def from_wire(err: Wire) -> ServeError:
    kind, message = err
    return KINDS.get(kind, BatchFailed)(message)


def nonfinite(rows: list[tuple[int, str]], shown: int = 8) -> NonFinite:
    """The error of a request whose embeddings of these inputs were NaN or Inf: (index in its `input`, "NaN" or
    "Inf") per input, in order."""
    named = ", ".join(f"{i} ({kind})" for i, kind in rows[:shown])
    more = f" and {len(rows) - shown} more" if len(rows) > shown else ""
    which = f"input {named}" if len(rows) == 1 else f"inputs {named}{more}"
    return NonFinite(f"non-finite values in the embedding of {which}; a fp16 overflow is the usual cause: try bf16 "
                     "(tune with --candidates bf16) or fp32", param="input")
