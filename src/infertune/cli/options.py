"""Option helpers shared by the commands: one duration syntax for every time flag, and SIGTERM handled as Ctrl-C."""

from __future__ import annotations

from typing import Any

import typer


def stop_on_sigterm() -> None:
    """SIGTERM (a job's timeout, `kill`) stops a long command like Ctrl-C, exit 143: its finally blocks run, so the
    worker processes and servers it started are stopped (a vLLM server left behind holds its memory)."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


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


def config_defaults(fields: dict[str, tuple]) -> dict[str, Any]:
    """Flag -> its default, read from the config field that holds it, so the CLI and the library cannot drift apart.

    `fields` maps a flag's parameter name to (Model, "field") or (Model, "field", to_flag), where to_flag turns the
    field's value into the flag's (bytes into MiB, a tuple into "1,8,32"). Each command module keeps its table as
    CONFIG_FIELDS; tests/unit/cli/test_cli_defaults.py holds every table to its command's signature."""
    out = {}
    for flag, (model, field, *to_flag) in fields.items():
        value = model.model_fields[field].get_default(call_default_factory=True)
        out[flag] = to_flag[0](value) if to_flag else value
    return out


def commas(values: Any) -> str:
    """(1, 8, 32) -> "1,8,32": a list field's default as the flag's text."""
    return ",".join(str(v) for v in values)


def duration_text(seconds: float) -> str:
    """3600 -> "1h", 300 -> "5m", 5 -> "5s": a time field's default as --help shows it (parsed back by `duration`)."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
