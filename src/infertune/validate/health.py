"""The finite-output drill: does the server produce non-finite embeddings (NaN, Inf) on these inputs?

Inputs are the workload's own texts (the first distinct ones) and adversarial probes that are known to push
half-precision activations over their range: very long repeated tokens, unusual unicode, empty-ish text. Each
is sent alone, then all of them together (padding and batch-mates change what a row sees). The drill fails
when an answer holds a NaN or Inf, or when the server refuses an input with its own non-finite report
(`infertune serve` answers 500 `nonfinite_embedding` naming the input instead of returning the row), or when
an input breaks the server (5xx). An input refused with a 4xx (over the limit, say) is listed, not failed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from infertune.validate.config import Drill, ValidateConfig
from infertune.validate.target import Target
from infertune.workloads.bodies import Requests

Log = Callable[[str], None]
NAME = "finite-output"
WORKLOAD_TEXTS = 16  # distinct workload texts probed
_REPORTED = re.compile(r"(\d+) \((NaN|Inf)\)")


def probes(max_tokens: int | None, texts: list[str]) -> list[tuple[str, str]]:
    """(name, text) of every input the drill sends: the workload's texts, then the adversarial ones, each within
    `max_tokens` (a token covers at least one character; a character is at most 4 byte-level tokens)."""
    n = max(8, min(int(max_tokens or 512) - 16, 2048))
    out = [(f"workload[{i}]", t) for i, t in enumerate(texts)]
    out += [
        ("repeated_word", "the " * n),
        ("repeated_punctuation", "!" * n),
        ("repeated_digits", "9" * n),
        ("repeated_emoji", "\U0001F525" * (n // 4)),
        ("mixed_scripts", "Ünïcödé ẞ ﬁ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 العربية עברית 中文 日本語 한국어 ∑∫√∞ ‰ ¿¡ «»"),
        ("zero_width_and_joiners", "a\u200bb\u200dc\u2060d \U0001F469\u200d\U0001F469\u200d\U0001F467 \ufeff"),
        ("combining_marks", "Z" + "\u0336\u0301\u0327" * max(1, n // 12)),
        ("control_whitespace", "\t\n\r\x0b\x0c tab and newlines \r\n"),
        ("whitespace_only", "   "),
        ("single_punctuation", "."),
        ("single_letter", "a"),
    ]
    return out


def workload_texts(req: Requests, limit: int = WORKLOAD_TEXTS) -> list[str]:
    """The first `limit` distinct texts of the workload's requests (token-id inputs are skipped)."""
    seen: dict[str, None] = {}
    for body in req.bodies:
        x = json.loads(body).get("input")
        for t in [x] if isinstance(x, str) else x if isinstance(x, list) else []:
            if isinstance(t, str) and t.strip() and len(seen) < limit:
                seen.setdefault(t)
        if len(seen) >= limit:
            break
    return list(seen)


def judge(status: int | None, body: Any, names: list[str]) -> dict[str, str]:
    """Each input of one request (`names`, in its order) -> its outcome: ok, nonfinite_returned (a NaN or Inf in
    the answer), nonfinite_reported (the server's own 500 naming it), refused_4xx, or error."""
    if status == 200:
        data = sorted((body or {}).get("data") or [], key=lambda d: d.get("index", 0))
        if len(data) != len(names):
            return dict.fromkeys(names, "error")
        return {n: "ok" if _finite(d.get("embedding")) else "nonfinite_returned"
                for n, d in zip(names, data, strict=True)}
    err = (body.get("error") or {}) if isinstance(body, dict) else {}
    msg = str(err.get("message", ""))
    if status is not None and status >= 500 and (err.get("code") == "nonfinite_embedding" or "non-finite" in msg):
        hit = {int(i) for i, _ in _REPORTED.findall(msg)}
        return {n: "nonfinite_reported" if (i in hit or not hit) else "ok_unanswered" for i, n in enumerate(names)}
    if status is not None and 400 <= status < 500 and status != 429:
        return dict.fromkeys(names, "refused_4xx")
    return dict.fromkeys(names, "error")


def _finite(vec: Any) -> bool:
    import numpy as np

    if not isinstance(vec, list):  # asked for floats: anything else is not an answer
        return False
    try:
        return bool(np.isfinite(np.asarray(vec, dtype=np.float64)).all())
    except (TypeError, ValueError):
        return False


def _post(url: str, model: str | None, inputs: list[str], timeout: float) -> tuple[int | None, Any, str]:
    import httpx

    try:
        r = httpx.post(url + "/v1/embeddings", json={"model": model, "input": inputs, "encoding_format": "float"},
                       timeout=timeout)
    except httpx.HTTPError as e:
        return None, None, f"{type(e).__name__}: {e}"
    try:
        return r.status_code, json.loads(r.text), r.text[:300]  # json.loads reads NaN and Infinity
    except ValueError:
        return r.status_code, None, r.text[:300]


def finite_output(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig, log: Log) -> Drill:
    if api != "embeddings":
        return Drill(name=NAME, reason="only built for embedding servers so far")
    t_wall = time.monotonic()
    model = json.loads(req.bodies[0]).get("model")
    items = int(target.limits.get("max_items_per_request") or 64)
    inputs = probes(target.limits.get("max_input_tokens"), workload_texts(req))
    log(f"{NAME}: {len(inputs)} inputs, each alone and all together")
    alone: dict[str, str] = {}
    together: dict[str, str] = {}
    notes: dict[str, str] = {}
    for name, text in inputs:
        status, body, raw = _post(target.url, model, [text], cfg.timeout_s * 4)
        alone.update(judge(status, body, [name]))
        if alone[name] not in ("ok", "nonfinite_returned"):
            notes[name] = f"{status}: {raw[:160]}"
    for at in range(0, len(inputs), max(1, items)):
        part = inputs[at:at + items]
        status, body, raw = _post(target.url, model, [t for _, t in part], cfg.timeout_s * 4)
        together.update(judge(status, body, [n for n, _ in part]))
        if status != 200:
            notes.setdefault("together", f"{status}: {raw[:160]}")
    return _verdict(inputs, alone, together, notes, round(time.monotonic() - t_wall, 1))


def _verdict(inputs: list[tuple[str, str]], alone: dict[str, str], together: dict[str, str],
             notes: dict[str, str], wall_s: float) -> Drill:
    both = {n: (alone.get(n), together.get(n)) for n, _ in inputs}
    returned = [n for n, o in both.items() if "nonfinite_returned" in o]
    reported = [n for n, o in both.items() if "nonfinite_reported" in o and n not in returned]
    errors = [n for n, o in both.items() if "error" in o and n not in returned + reported]
    refused = [n for n, o in both.items() if "refused_4xx" in o]
    fails = []
    if returned:
        fails.append(f"NaN or Inf returned in the embedding of {', '.join(returned)}")
    if reported:
        fails.append(f"non-finite embeddings (the server refused them with its non-finite error) for "
                     f"{', '.join(reported)}")
    if errors:
        fails.append(f"server errors for {', '.join(errors)}")
    answered = sum(o == ("ok", "ok") for o in both.values())
    if not answered:
        fails.append("no input was answered with finite embeddings both alone and together")
    evidence = {"inputs": {n: {"chars": len(t), "alone": alone.get(n), "together": together.get(n)}
                           for n, t in inputs},
                "nonfinite_returned": returned, "nonfinite_reported": reported, "errors": errors,
                "refused_4xx": refused, "answered_finite": answered, "notes": notes}
    ok = (f"all {answered} inputs answered with finite embeddings, alone and together"
          + (f" ({len(refused)} refused with 4xx: {', '.join(refused)})" if refused else ""))
    return Drill(name=NAME, passed=not fails, reason="; ".join(fails) or ok, evidence=evidence, wall_s=wall_s)
