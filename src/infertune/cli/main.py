"""`infertune` entry point. User mistakes (InfertuneError) print one clear message and exit 2."""

from __future__ import annotations

import importlib
import os
import sys

import typer

app = typer.Typer(
    name="infertune",
    help="Find the fastest way to serve a model on this hardware, for your traffic, without changing "
    "its answers - and prove it.\n\nStart with `infertune tune` (embedded MiniLM on a sample workload).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _print_version(value: bool) -> None:
    if value:
        from infertune import __version__

        typer.echo(f"infertune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_print_version,
                                 help="print infertune's version and exit"),
) -> None:
    """Commands: tune, serve, bench, doctor, inspect, plan, deploy, validate, export, verify. Results go to stdout,
    progress and logs to stderr; time flags take 90, 90s, 10m or 1h; user mistakes exit 2 with one line."""


@app.command("version")
def _version() -> None:
    """Print infertune's version."""
    from infertune import __version__

    typer.echo(__version__)


# each module defines register(app); they import nothing heavy at module level
COMMANDS = ["tune", "serve", "bench", "doctor", "inspect", "plan", "deploy", "validate", "export", "verify"]
for _name in COMMANDS:
    try:
        importlib.import_module(f"infertune.cli.{_name}").register(app)
    except ModuleNotFoundError as _e:  # a command not built yet
        if _e.name != f"infertune.cli.{_name}":
            raise


def _error(message: str) -> None:
    """One line on stderr, never wrapped (a piped error keeps `pip install ...` whole)."""
    from rich.markup import escape

    from infertune.console import console

    console(stderr=True).print(f"[bold red]error:[/] {escape(message)}")


def main() -> None:
    from infertune.errors import InfertuneError

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from infertune.logs import ENV_ON, route_library_logs

    os.environ.setdefault(ENV_ON, "1")  # the processes this command starts route their libraries' logs too
    if os.environ[ENV_ON] == "1":
        route_library_logs()  # libraries' warnings to a log file (infertune.logs), not the terminal
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        # typer's rich help and usage errors draw 80-column boxes that split long lines when piped;
        # click's plain ones do not (TYPER_USE_RICH, read by typer.core at call time)
        import typer.core

        typer.core.HAS_RICH = False
    try:
        app()
    except InfertuneError as e:
        _error(str(e))
        sys.exit(e.exit_code)
    except Exception as e:  # pydantic validation of user-given values is a user mistake too
        if type(e).__name__ != "ValidationError":
            raise
        msgs = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())  # type: ignore[attr-defined]
        _error(f"invalid value: {msgs}")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
