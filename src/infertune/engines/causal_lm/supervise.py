"""Keep vLLM running under `infertune serve`: when its server exits without being asked to (its engine
process was killed, it ran out of memory), start it again on the same port, at most `max_restarts` times,
saying so on stderr each time. Between the exit and the new server's first 200 nothing listens on the port,
so GET /health fails (connection refused) for as long as vLLM is away. SIGTERM/SIGINT still stop it: the
signal goes to whichever server is running, and the exit code is the one serve_llm always returned."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from infertune.errors import InfertuneError

MAX_RESTARTS = 3


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def clean_code(code: int | None) -> int:
    """serve_llm's exit code once it was asked to stop: 0 when vLLM stopped on the signal it was sent."""
    return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else int(code or 0)


def supervise(holder: list[Any], start: Callable[[], Any], stopping: list[int], *, max_restarts: int = MAX_RESTARTS,
              ready_timeout_s: float = 900, grace_s: float = 30, poll_s: float = 0.5,
              say: Callable[[str], None] = _say) -> int:
    """Wait on the server in `holder[0]` (a VLLMServer, already healthy) until `stopping` holds a signal, then
    stop it and return its exit code (0 = clean). An exit nobody asked for is followed by a fresh server from
    `start()` (put into `holder[0]`, so a signal handler reaches it) up to `max_restarts` times; one more exit
    returns that exit's code (1 when it was 0)."""
    restarts = 0
    while True:
        srv = holder[0]
        while srv.proc.poll() is None and not stopping:
            time.sleep(poll_s)
        if stopping:
            return clean_code(srv.stop(stopping[0], grace_s))
        code = srv.stop(grace_s=5)  # reaps what is left of its process group (the engine core)
        if restarts >= max_restarts:
            say(f"vLLM exited unexpectedly with code {code}; it was restarted {restarts} time(s) already "
                f"(at most {max_restarts}): giving up")
            return code or 1
        restarts += 1
        say(f"vLLM exited unexpectedly with code {code}; restarting it ({restarts} of at most {max_restarts}); "
            "/health fails until it is back")
        t0 = time.monotonic()
        holder[0] = start()
        if stopping:
            continue
        try:
            holder[0].wait_healthy(ready_timeout_s)
        except InfertuneError as e:
            say(f"vLLM restart {restarts} did not come up: {str(e).splitlines()[0]}")
            continue
        say(f"vLLM restarted (pid {holder[0].proc.pid}) and healthy after {time.monotonic() - t0:.1f} s "
            f"(restart {restarts} of at most {max_restarts})")
