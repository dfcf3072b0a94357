"""What the engine client and the batch core say to each other, and the ZeroMQ link that carries it
between processes (multi-process `serve`; in one process inproc.py carries the same messages).

Frontend -> engine (PUSH -> the engine's PULL): one message carries every request a frontend admitted
in one turn of its event loop, as three frames: a small pickled header (frontend index, request ids
and row counts), the row lengths (int32) and the token ids of all rows concatenated (int32). No
per-item Python objects cross the socket, so a 2048-input request costs one message, like a 1-input one.

Engine -> frontend (PUSH -> the frontend's own PULL): the requests finished since the last send, as a
header (the engine's index, then per request its id and rows, or an error's kind and message:
serve/errors.py) and one float32 frame with the rows of the successful ones, in header order. A message
with no requests is a heartbeat: the engine is making progress on other frontends' work, so a frontend
whose own requests wait behind that work does not take the engine for stalled.

Addresses are ipc:// sockets in a private directory the launcher makes; both sides are our own processes
of one user, which is why a pickled header is fine here (never expose these sockets on a network).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from infertune.serve.errors import Wire

log = logging.getLogger("infertune.serve")


def engine_addr(run_dir: str, index: int) -> str:
    return f"ipc://{run_dir}/engine-{index}.sock"


def frontend_addr(run_dir: str, index: int) -> str:
    return f"ipc://{run_dir}/frontend-{index}.sock"


def pack_requests(frontend: int, reqs: list[tuple[int, list[list[int]]]]) -> list[bytes]:
    """Frames for a list of (request id, token id rows)."""
    every = [r for _, rows in reqs for r in rows]
    lens = np.fromiter(map(len, every), dtype=np.int32, count=len(every))
    flat = np.fromiter(itertools.chain.from_iterable(every), dtype=np.int32, count=int(lens.sum()))
    head = pickle.dumps((frontend, [(rid, len(rows)) for rid, rows in reqs]), protocol=5)
    return [head, lens.tobytes(), flat.tobytes()]


def unpack_requests(frames: list[Any]) -> tuple[int, list[tuple[int, list[list[int]]]]]:
    frontend, heads = pickle.loads(frames[0])
    lens = np.frombuffer(frames[1], dtype=np.int32)
    flat = np.frombuffer(frames[2], dtype=np.int32)
    ends = np.cumsum(lens)
    out, row, start = [], 0, 0
    for rid, n in heads:
        rows = []
        for k in range(row, row + n):
            rows.append(flat[start:ends[k]].tolist())
            start = int(ends[k])
        row += n
        out.append((rid, rows))
    return frontend, out


def pack_results(results: list[tuple[int, np.ndarray | None, Wire | None]], engine: int = 0) -> list[bytes]:
    """Frames for finished requests of engine `engine`: (request id, float32 rows or None, error or None).
    No results: a heartbeat (the engine is making progress, on other clients' work)."""
    head = [(rid, None if rows is None else len(rows), err) for rid, rows, err in results]
    arrays = [np.ascontiguousarray(rows, dtype=np.float32) for _, rows, _ in results if rows is not None]
    body = np.concatenate(arrays).tobytes() if arrays else b""
    return [pickle.dumps((engine, head), protocol=5), body]


def unpack_answer(frames: list[Any], dim: int) -> tuple[int, list[tuple[int, np.ndarray | None, Wire | None]]]:
    """(the engine that sent it, its finished requests)."""
    engine, head = pickle.loads(frames[0])
    flat = np.frombuffer(frames[1], dtype=np.float32).reshape(-1, dim) if len(frames[1]) else None
    out, at = [], 0
    for rid, n, err in head:
        if n is None:
            out.append((rid, None, err))
        else:
            out.append((rid, flat[at:at + n], None))
            at += n
    return engine, out


class ZmqInbox:
    """The batch core's intake in an engine process: the PULL socket every frontend pushes to."""

    def __init__(self, sock: Any):
        self.sock = sock

    def get(self, timeout_s: float) -> list[list[bytes]]:
        import zmq

        if not self.sock.poll(int(timeout_s * 1000)):
            return []
        out = []
        while True:
            try:
                out.append(self.sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return out


class ZmqLink:
    """A frontend's link to the engine processes: a PUSH socket per engine, and its own PULL socket that the
    engines answer on (read on the event loop; every message goes to `deliver`)."""

    def __init__(self, run_dir: str, index: int, engines: int):
        self.run_dir, self.index, self.engines = run_dir, index, engines
        self._push: list[Any] = []
        self._pull: Any = None
        self._reader: asyncio.Task | None = None

    async def start(self, deliver: Callable[[list[Any]], None]) -> None:
        import zmq
        import zmq.asyncio

        self._ctx = zmq.Context()
        for i in range(self.engines):
            s = self._ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 0)  # admission bounds what is queued, not the socket
            s.connect(engine_addr(self.run_dir, i))
            self._push.append(s)
        self._actx = zmq.asyncio.Context()
        self._pull = self._actx.socket(zmq.PULL)
        self._pull.setsockopt(zmq.LINGER, 0)
        self._pull.bind(frontend_addr(self.run_dir, self.index))
        self._reader = asyncio.get_running_loop().create_task(self._read_loop(deliver))

    def send(self, engine: int, frames: list[bytes]) -> None:
        self._push[engine].send_multipart(frames, copy=False)

    async def _read_loop(self, deliver: Callable[[list[Any]], None]) -> None:
        while True:
            frames = await self._pull.recv_multipart()
            try:
                deliver(frames)
            except Exception:  # noqa: BLE001 - a bad message is logged; the requests in it time out
                log.exception("could not read a message from an engine")

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        for s in self._push:
            s.close()
        if self._pull is not None:
            self._pull.close()
