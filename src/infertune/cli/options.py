"""Option helpers shared by the commands: one duration syntax for every time flag."""

from __future__ import annotations

from typing import Any

import typer


def duration(value: Any) -> float:
    """Seconds, or a number with a unit: 90, 90s, 10m, 1h, 500ms (infertune.durations.parse_duration)."""
    from infertune.durations import parse_duration
    from infertune.errors import InfertuneError

    try:
        return parse_duration(value)
    except InfertuneError:
        raise typer.BadParameter(f"{value!r} is not a duration; write seconds or a unit, "
                                 "e.g. 90, 90s, 10m or 1h") from None


def Duration(help: str, *decls: str, **kw: Any) -> Any:  # noqa: N802  (used like typer.Option)
    """typer.Option for a time flag: accepts 90, 90s, 10m, 1h; the value is seconds (float)."""
    return typer.Option(*decls, parser=duration, metavar="DURATION", help=f"{help} [90, 90s, 10m, 1h]", **kw)
