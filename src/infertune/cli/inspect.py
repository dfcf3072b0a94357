"""`infertune inspect`: thin shell over infertune.inspect.inspect_model()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_cmd)


def _si(x: float, unit: str) -> str:
    for div, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.2f} {p}{unit}"
    return f"{x:.0f} {unit}"


def inspect_cmd(
    model: Annotated[str, typer.Argument(help="model directory, config.json or alias (minilm)")],
    seq_len: Annotated[int, typer.Option(help="prompt length for prefill FLOPs and the decode step's cache")] = 512,
    sensitivity: Annotated[bool, typer.Option(help="per-layer int8 sensitivity (from --results, or measured for an embedding model)")] = False,
    results: Annotated[Path | None, typer.Option(help="tune results.json to read the sensitivity from")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")] = False,
) -> None:
    """Parameters and bytes by module type and dtype; FLOPs per token by layer (prefill, decode) counted on
    meta tensors (no weights needed); attention share of FLOPs; KV-cache bytes per token. The figures go to
    stdout; with --json, JSON goes there instead."""
    from infertune.extras import require

    require("inspect")
    from infertune.console import console
    from infertune.inspect import InspectConfig, inspect_model

    r = inspect_model(InspectConfig(model=model, seq_len=seq_len, sensitivity=sensitivity, results=results))
    con = console(stderr=as_json)
    con.print(f"[bold]{r.architecture}[/] ({r.model_type}): {_si(r.params, 'params')}, {r.bytes_total / 2**20:.1f} MiB "
              f"({r.dtype_source})", highlight=False)
    for t, n in sorted(r.params_by_module_type.items(), key=lambda kv: -kv[1]):
        con.print(f"  {t:<28}{_si(n, 'params'):>14}{r.bytes_by_module_type[t] / 2**20:>12.1f} MiB", highlight=False)
    by_dtype = ", ".join(f"{k} {_si(v, 'params')}" for k, v in r.params_by_dtype.items())
    con.print(f"  by dtype: {by_dtype}", highlight=False)
    for ph, fl in r.flops_per_token.items():
        con.print(f"FLOPs per token, {ph} at {r.seq_len} tokens: {_si(fl, 'FLOP')} (analytic "
                  f"{_si(r.flops_per_token_analytic.get(ph, 0), 'FLOP')}); attention share "
                  f"{100 * r.attention_flops_share[ph]:.1f}%", highlight=False)
    con.print(f"KV cache: {r.kv_bytes_per_token} bytes/token ({r.kv_layout}, head_dim {r.head_dim}); "
              f"counted in {r.wall_s:.1f} s", highlight=False)
    for n in r.notes:
        con.print(f"[yellow]note:[/] {n}", highlight=False)
    for s in r.sensitivity[:10]:
        con.print(f"  sensitivity {s['layer']:<50} drop {s['drop']:.2e}", highlight=False)
    if as_json:
        typer.echo(json.dumps(r.model_dump(mode="json"), indent=2))
