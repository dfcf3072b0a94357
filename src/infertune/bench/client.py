"""One request to an OpenAI-compatible endpoint, timed, with every failure turned into a counted kind.

A record is a tuple (sched, dispatched, first, end, kind, message, out_tokens, in_tokens, chunk_times):
monotonic seconds; `first` is the first content token for streams (NaN otherwise); `kind` is "" on
success or one of KINDS; `message` is the error, or on success "usage" when the server reported token
counts (else tokens are estimated: words for input, content chunks for output); `chunk_times` holds the arrival time of every content chunk (streams only).
"""  # noqa: E501

from __future__ import annotations

import asyncio
import json
import time

from infertune.bench.records import Record

# A 32-vector embeddings answer is ~12,000 floats: orjson (the serve extra brings it) parses it several times faster
# than json, so the load generator takes less of the host's CPU, which a server on the same host shares
# (docs/measurements/2026-12-01-h200-engine-overlap)
try:
    from orjson import loads as _loads  # its JSONDecodeError is a ValueError
except ImportError:  # pragma: no cover - the bench extra alone
    _loads = json.loads

NAN = float("nan")
KINDS = ("connect", "timeout", "http_4xx", "http_5xx", "non_json", "bad_response", "truncated_stream", "client")
HINTS = {
    "connect": "the server refused or dropped the connection: is it running at this URL?",
    "timeout": "no complete answer within --timeout",
    "http_4xx": "the server rejected the request: check --api, --model and the workload fields",
    "http_5xx": "the server failed while handling the request",
    "non_json": "the server answered with something that is not JSON: is the URL an OpenAI-compatible API?",
    "bad_response": "the JSON does not have the shape of the chosen --api: is this the right API kind?",
    "truncated_stream": "the stream ended before 'data: [DONE]' (server closed or crashed mid-answer)",
    "client": "an unexpected client-side error",
}


def http_kind(status: int) -> str:
    return "http_4xx" if 400 <= status < 500 else "http_5xx" if status >= 500 else "bad_response"


def check_shape(api: str, obj: object) -> tuple[str, int | None, int | None]:
    """-> (problem or "", prompt_tokens, completion_tokens) for a non-streamed JSON answer."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}", None, None
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if api == "embeddings":
        data = obj.get("data")
        if not (isinstance(data, list) and data and isinstance(data[0], dict) and "embedding" in data[0]):
            return "no data[0].embedding in the answer (not an embeddings response)", pt, ct
        return "", pt, ct
    ch = obj.get("choices")
    if not (isinstance(ch, list) and ch and isinstance(ch[0], dict)):
        return "no choices[] in the answer (not a completions/chat response)", pt, ct
    if api == "chat" and not isinstance(ch[0].get("message"), dict):
        return "choices[0] has no 'message' (a completions answer? try --api completions)", pt, ct
    if api == "completions" and "text" not in ch[0]:
        return "choices[0] has no 'text' (a chat answer? try --api chat)", pt, ct
    return "", pt, ct


def judge_json(api: str, raw: bytes, content_type: str, sched: float, disp: float, end: float,
               in_tokens: int) -> tuple:
    """The record of a complete non-streamed 200 answer: parsed, shape-checked, tokens from usage."""
    try:
        obj = _loads(raw)
    except ValueError:
        return Record(sched, disp, NAN, end, "non_json", f"{content_type}: {raw[:80].decode('utf-8', 'replace')!r}",
                0, in_tokens, None)
    problem, pt, ct = check_shape(api, obj)
    if problem:
        return Record(sched, disp, NAN, end, "bad_response", problem, 0, in_tokens, None)
    return Record(sched, disp, NAN, end, "", "usage" if pt is not None else "", ct or 0, pt or in_tokens, None)


def _delta_text(api: str, ev: dict) -> str | None:
    ch = ev.get("choices")
    if not ch or not isinstance(ch, list) or not isinstance(ch[0], dict):
        return None
    if api == "chat":
        d = ch[0].get("delta") or {}
        return d.get("content") or d.get("reasoning_content") or None
    return ch[0].get("text") or None


async def request(session, url: str, body: bytes, api: str, stream: bool, sched: float, in_tokens: int,
                  headers: dict) -> Record:
    import aiohttp

    now = time.monotonic
    disp = now()
    first = NAN
    chunks: list[float] | None = [] if stream else None
    out_tokens = 0
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            if resp.status != 200:
                text = (await resp.read())[:200].decode("utf-8", "replace")
                return Record(sched, disp, first, now(), http_kind(resp.status), f"HTTP {resp.status}: {text}",
                        0, in_tokens, chunks)
            if not stream:
                raw = await resp.read()
                return judge_json(api, raw, resp.content_type, sched, disp, now(), in_tokens)
            done, usage, other = False, None, []
            async for line in resp.content:
                t = now()
                if not line.startswith(b"data:"):
                    if line.strip():
                        other.append(line)
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                try:
                    ev = json.loads(data)
                except ValueError:
                    return Record(sched, disp, first, t, "non_json", f"stream event is not JSON: {data[:80]!r}",
                            out_tokens, in_tokens, chunks)
                if isinstance(ev, dict) and isinstance(ev.get("usage"), dict):
                    usage = ev["usage"]
                if isinstance(ev, dict) and _delta_text(api, ev):
                    if not chunks:
                        first = t
                    chunks.append(t)
                    out_tokens += 1
            end = now()
            if not done:
                if not chunks and other:  # the server ignored "stream": a plain JSON answer
                    try:
                        obj = json.loads(b"".join(other))
                    except ValueError:
                        return Record(sched, disp, first, end, "non_json",
                                f"{resp.content_type}: {b''.join(other)[:80].decode('utf-8', 'replace')!r}",
                                0, in_tokens, chunks)
                    problem, pt, ct = check_shape(api, obj)
                    if problem:
                        return Record(sched, disp, first, end, "bad_response", problem, 0, in_tokens, chunks)
                    return Record(sched, disp, end, end, "", "", ct or 0, pt or in_tokens, [end])
                return Record(sched, disp, first, end, "truncated_stream",
                        f"stream ended after {out_tokens} chunks without [DONE]", out_tokens, in_tokens, chunks)
            if not chunks:
                return Record(sched, disp, first, end, "bad_response", "stream had no content chunks", 0, in_tokens,
                              chunks)
            if usage:
                out_tokens = usage.get("completion_tokens") or out_tokens
                in_tokens = usage.get("prompt_tokens") or in_tokens
            return Record(sched, disp, first, end, "", "usage" if usage else "", out_tokens, in_tokens, chunks)
    except TimeoutError:
        return Record(sched, disp, first, now(), "timeout", "no complete answer within the timeout", out_tokens,
                      in_tokens, chunks)
    except aiohttp.ClientPayloadError as e:
        return Record(sched, disp, first, now(), "truncated_stream", f"connection closed mid-answer: {e}", out_tokens,
                      in_tokens, chunks)
    except (aiohttp.ClientConnectionError, OSError) as e:
        kind = "truncated_stream" if (stream and chunks) else "connect"
        return Record(sched, disp, first, now(), kind, f"{type(e).__name__}: {e}", out_tokens, in_tokens, chunks)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # never let one odd answer kill the run; count it instead
        return Record(sched, disp, first, now(), "client", f"{type(e).__name__}: {e}", out_tokens, in_tokens, chunks)
