"""A lean HTTP/1.1 keep-alive client for non-streamed requests: asyncio protocols, httptools' C parser.

Why: aiohttp costs ~250 us of CPU per request on the 2-core box in open loop (request objects, payload
writers, timers, tracing hooks, all in Python), so one core tops out near 4,000 req/s, and a client
that runs near its ceiling reports its own hiccups as server latency. A request here is one prebuilt
byte string written to a pooled connection and one parser callback chain: about a third of the CPU per request,
measured side by side in docs/bench.md. Responses are judged exactly as the aiohttp path judges them
(`client.judge_json`), so both clients count the same errors. Streams (SSE) keep using aiohttp.

A connection carries one request at a time (no pipelining); idle connections are reused last-in
first-out (the warmest socket); a connection the server closed or marked `Connection: close` is dropped.
"""  # noqa: E501

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

from infertune.bench.client import NAN, http_kind, judge_json
from infertune.bench.records import Record


class MidAnswer(ConnectionError):
    """The server closed the connection after the response headers, before the body was complete."""


class _Conn(asyncio.Protocol):
    __slots__ = ("transport", "parser", "fut", "status", "body", "ctype", "keep", "closed")

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.fut: asyncio.Future | None = None
        self.status, self.body, self.ctype, self.keep, self.closed = 0, [], b"", True, False

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception as e:  # httptools.HttpParserError and friends: not HTTP
            self._fail(ValueError(f"unparseable HTTP response: {e}"))
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.status:  # headers came, the body did not finish
            self._fail(MidAnswer(f"connection closed mid-answer (HTTP {self.status}, "
                                 f"{sum(map(len, self.body))} body bytes received)"))
        else:
            self._fail(ConnectionResetError("server closed the connection before answering"))

    def _fail(self, exc: Exception) -> None:
        if self.fut is not None and not self.fut.done():
            self.fut.set_exception(exc)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 12 and name.lower() == b"content-type":
            self.ctype = value

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(time.monotonic())


class LeanClient:
    """Sends prebuilt POSTs to one URL over a pool of keep-alive connections."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float, max_connections: int):
        u = urlsplit(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = u.scheme == "https"
        host_hdr = u.netloc
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() not in ("content-length", "host"))
        self.head = (f"POST {u.path or '/'}{'?' + u.query if u.query else ''} HTTP/1.1\r\nHost: {host_hdr}\r\n"
                     f"{extra}Content-Length: ").encode("latin-1")
        self.timeout = timeout
        self.idle: list[_Conn] = []
        self.sem = asyncio.Semaphore(max_connections)
        self.loop = asyncio.get_running_loop()
        self._msgs: dict[int, bytes] = {}

    def message(self, j: int, body: bytes) -> bytes:
        m = self._msgs.get(j)
        if m is None:
            m = self._msgs[j] = self.head + b"%d\r\n\r\n" % len(body) + body
        return m

    def _idle_conn(self) -> _Conn | None:
        while self.idle:
            c = self.idle.pop()
            if not c.closed:
                return c
        return None

    async def _new_conn(self) -> _Conn:
        _, c = await self.loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl or None)
        return c

    async def request(self, j: int, body: bytes, api: str, sched: float, in_tokens: int) -> Record:
        """One request; the same record tuple as client.request (chunk_times None: not streamed)."""
        now = time.monotonic
        disp = now()
        c: _Conn | None = None
        async with self.sem:
            timer = None
            try:
                fut = self.loop.create_future()
                timer = self.loop.call_later(self.timeout, _expire, fut)
                c = self._idle_conn() or await _first(self._new_conn(), fut)
                c.fut, c.status, c.body, c.ctype, c.keep = fut, 0, [], b"", True
                c.transport.write(self.message(j, body))
                end = await fut
            except TimeoutError:
                self._drop(c)
                return Record(sched, disp, NAN, now(), "timeout", "no complete answer within the timeout", 0,
                              in_tokens, None)
            except MidAnswer as e:
                self._drop(c)
                return Record(sched, disp, NAN, now(), "truncated_stream", str(e), 0, in_tokens, None)
            except (ConnectionError, OSError) as e:
                self._drop(c)
                return Record(sched, disp, NAN, now(), "connect", f"{type(e).__name__}: {e}", 0, in_tokens, None)
            except ValueError as e:
                self._drop(c)
                return Record(sched, disp, NAN, now(), "bad_response", str(e), 0, in_tokens, None)
            finally:
                if timer is not None:
                    timer.cancel()
            c.fut = None
            if c.keep and not c.closed:
                self.idle.append(c)
            else:
                c.transport.close()
        raw = b"".join(c.body)
        if c.status != 200:
            text = raw[:200].decode("utf-8", "replace")
            return Record(sched, disp, NAN, end, http_kind(c.status), f"HTTP {c.status}: {text}", 0, in_tokens, None)
        return judge_json(api, raw, c.ctype.decode("latin-1").split(";")[0].strip(), sched, disp, end, in_tokens)

    def _drop(self, c: _Conn | None) -> None:
        if c is not None and c.transport is not None:
            c.fut = None
            c.transport.close()

    def close(self) -> None:
        for c in self.idle:
            c.transport.close()
        self.idle.clear()


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


async def _first(conn_coro, fut: asyncio.Future) -> _Conn:
    """Await a new connection, unless the request's deadline (fut failing) comes first."""
    task = asyncio.ensure_future(conn_coro)
    done, _ = await asyncio.wait((task, fut), return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    task.cancel()
    fut.result()  # raises TimeoutError
    raise TimeoutError
