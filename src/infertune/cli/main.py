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

@app.callback()
def _root() -> None:
    """Commands: tune, serve, bench, doctor, inspect, plan, deploy, validate."""


@app.command("version")
def _version() -> None:
    """Print infertune's version."""
    from infertune import __version__

    typer.echo(__version__)


# each module defines register(app); they import nothing heavy at module level
COMMANDS = ["tune", "serve", "bench", "doctor", "inspect", "plan", "deploy", "validate"]
for _name in COMMANDS:
    try:
        importlib.import_module(f"infertune.cli.{_name}").register(app)
    except ModuleNotFoundError as _e:  # a command not built yet
        if _e.name != f"infertune.cli.{_name}":
            raise


def main() -> None:
    from infertune.errors import InfertuneError

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        app()
    except InfertuneError as e:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/] {e}", highlight=False)
        sys.exit(e.exit_code)
    except Exception as e:  # pydantic validation of user-given values is a user mistake too
        if type(e).__name__ != "ValidationError":
            raise
        from rich.console import Console

        msgs = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())  # type: ignore[attr-defined]
        Console(stderr=True).print(f"[bold red]error:[/] invalid value: {msgs}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
