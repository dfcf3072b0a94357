"""One duration syntax for every time flag and config field: `90`, `90s`, `1.5m`, `10m`, `1h`, `500ms`.

A bare number is seconds. The CLI's time options (`--duration`, `--timeout`, `--time-budget`,
`--request-timeout-s`, `--soak`, ...) all read their value through `parse_duration`.
"""

from __future__ import annotations

import re

from infertune.errors import InfertuneError

_DUR = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|sec|m|min|h)?\s*$", re.IGNORECASE)
_MULT = {"ms": 0.001, "s": 1.0, "sec": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float, flag: str | None = None) -> float:
    """'90' / '90s' / '10m' / '1h' / '500ms' -> seconds (float). Numbers pass through."""
    if isinstance(text, bool):
        raise InfertuneError(f"cannot read duration {text!r}")
    if isinstance(text, int | float):
        return float(text)
    m = _DUR.match(text)
    if not m:
        where = f"{flag} " if flag else ""
        raise InfertuneError(f"cannot read duration {where}{text!r}; write seconds or a unit, e.g. 90, 90s, 10m or 1h")
    unit = m.group(2).lower() if m.group(2) else None
    return float(m.group(1)) * _MULT[unit]


def format_duration(seconds: float) -> str:
    """The shortest exact spelling in the same syntax: 3600 -> '1h', 90 -> '90s', 600 -> '10m'."""
    for unit, mult in (("h", 3600.0), ("m", 60.0)):
        if seconds >= mult and seconds % mult == 0:
            return f"{seconds / mult:g}{unit}"
    return f"{seconds:g}s"


def _to_seconds(value: object) -> object:
    return parse_duration(value) if isinstance(value, str) else value


def _seconds_type():
    from typing import Annotated

    from pydantic import BeforeValidator

    return Annotated[float, BeforeValidator(_to_seconds)]


# a pydantic field type: seconds as a float, also given as "90s", "10m", "1h" (configs take what flags take)
Seconds = _seconds_type()
