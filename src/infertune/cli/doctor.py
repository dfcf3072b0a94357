"""`infertune doctor` and `infertune doctor explain`: thin shells over infertune.doctor."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

LEVEL_STYLE = {"ok": "[green]ok[/]", "warning": "[yellow]warn[/]", "error": "[bold red]ERROR[/]"}


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="Check this host/container for GPU inference problems; `doctor explain` reads logs.",
                      invoke_without_command=True, no_args_is_help=False)
    sub.callback(invoke_without_command=True)(doctor_cmd)
    sub.command("explain")(explain_cmd)
    app.add_typer(sub, name="doctor")


def doctor_cmd(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON on stdout")] = False,
    no_torch: Annotated[bool, typer.Option("--no-torch", help="skip the torch/onnxruntime subprocess probe")] = False,
) -> None:
    """Report OS, CPU, RAM, NVIDIA driver and CUDA, torch build vs each GPU, NVML, device nodes, containers,
    ECC/clocks/MIG and the inference stack. The findings go to stdout (with --json, JSON goes there
    instead). Exit code: 0 all ok, 1 warnings, 3 errors."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.markup import escape

    from infertune.console import console
    from infertune.doctor.checks import doctor
    from infertune.doctor.schema import DoctorConfig

    report = doctor(DoctorConfig(probe_torch=not no_torch))
    con = console(stderr=as_json)
    for f in report.findings:
        con.print(f"{LEVEL_STYLE[f.level]:>22} [bold]{f.check}[/]: {escape(f.message)}", highlight=False)
        if f.fix:
            con.print(f"{'':>10} fix: {escape(f.fix)}", highlight=False, style="dim")
    con.print(f"worst: {report.worst} (exit {report.exit_code})")
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2, default=str))
    raise typer.Exit(report.exit_code)


def explain_cmd(
    file: Annotated[str, typer.Argument(help="log file, or - for stdin")] = "-",
    as_json: Annotated[bool, typer.Option("--json", help="print matches as JSON on stdout")] = False,
    top: Annotated[int, typer.Option(help="show at most this many matches")] = 5,
) -> None:
    """Match a pasted log against known failure signatures (cause, fix, source); the matches go to stdout
    (with --json, JSON goes there instead). Exit 1 if none matched."""
    from infertune.console import console
    from infertune.doctor.explain import explain
    from infertune.doctor.schema import ExplainConfig
    from infertune.errors import InfertuneError

    if file == "-":
        text = sys.stdin.read()
    else:
        p = Path(file)
        if not p.is_file():
            raise InfertuneError(f"log file {file} does not exist; pass a file or - to read stdin")
        text = p.read_text(errors="replace")
    res = explain(ExplainConfig(text=text, source=file, max_matches=top))
    con = console(stderr=as_json)
    for i, m in enumerate(res.matches, 1):
        con.print(f"[bold]{i}. {m.title}[/] [dim]({m.id}, {m.confidence} confidence, line {m.line_no}, "
                  f"{m.hits} line(s))[/]", highlight=False)
        con.print(f"   line:  {m.line[:200]}", highlight=False)
        if m.details:
            con.print(f"   found: {', '.join(f'{k}={v}' for k, v in m.details.items())}", highlight=False)
        con.print(f"   cause: {m.cause}\n   fix:   {m.fix}\n   see:   {m.source}", highlight=False)
    con.print(res.message, highlight=False)
    if as_json:
        typer.echo(json.dumps(res.model_dump(mode="json"), indent=2))
    if not res.matches:
        raise typer.Exit(1)
