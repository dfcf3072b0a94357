"""What frontends and engine processes say to each other over ZeroMQ (multi-process `serve`).

Frontend -> engine (PUSH -> the engine's PULL): one message carries every request a frontend admitted
in one turn of its event loop, as three frames: a small pickled header (frontend index, request ids
and row counts), the row lengths (int32) and the token ids of all rows concatenated (int32). No
per-item Python objects cross the socket, so a 2048-input request costs one message, like a 1-input one.

Engine -> frontend (PUSH -> the frontend's own PULL): the requests finished since the last send, as a
header (request id, rows, or an error's status/message/type/code) and one float32 frame with the rows of
the successful ones, in header order.

Addresses are ipc:// sockets in a private directory the launcher makes; both sides are our own processes
of one user, which is why a pickled header is fine here (never expose these sockets on a network).
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import numpy as np


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


Error = tuple[int, str, str, str | None]  # status, message, type, code


def pack_results(results: list[tuple[int, np.ndarray | None, Error | None]]) -> list[bytes]:
    """Frames for finished requests: (request id, float32 rows or None, error or None)."""
    head = [(rid, None if rows is None else len(rows), err) for rid, rows, err in results]
    arrays = [np.ascontiguousarray(rows, dtype=np.float32) for _, rows, _ in results if rows is not None]
    body = np.concatenate(arrays).tobytes() if arrays else b""
    return [pickle.dumps(head, protocol=5), body]


def unpack_results(frames: list[Any], dim: int) -> list[tuple[int, np.ndarray | None, Error | None]]:
    head = pickle.loads(frames[0])
    flat = np.frombuffer(frames[1], dtype=np.float32).reshape(-1, dim) if len(frames[1]) else None
    out, at = [], 0
    for rid, n, err in head:
        if n is None:
            out.append((rid, None, err))
        else:
            out.append((rid, flat[at:at + n], None))
            at += n
    return out
