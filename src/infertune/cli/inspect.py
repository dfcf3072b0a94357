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


def _layer_rows(r) -> list[tuple[str, list[str]]]:
    """One row per layer, consecutive blocks with the same figures merged (layer01-26 of an MoE model)."""
    phases = list(r.flops_per_token)
    rows: list[tuple[str, list[str]]] = []
    first = last = ""
    for k, fl in r.flops_per_token_by_layer.items():
        ai = r.arithmetic_intensity_by_layer.get(k, {})
        cells = [_si(fl[ph], "FLOP") if ph in fl else "-" for ph in phases]
        cells += [f"{ai[ph]:.1f}" if ph in ai else "-" for ph in phases]
        if r.bound_by_layer:
            cells += [r.bound_by_layer.get(k, {}).get(ph, "-") for ph in phases]
        if rows and k.startswith("layer") and last.startswith("layer") and rows[-1][1] == cells:
            rows[-1] = (f"{first}-{k.removeprefix('layer')}", cells)
        else:
            first = k
            rows.append((k, cells))
        last = k
    return rows


def _print_layers(con, r) -> None:
    phases = list(r.flops_per_token)
    step = f"a {r.seq_len}-token prefill" + (f", a decode step at {r.seq_len} cached tokens"
                                            if "decode" in phases else "")
    src = ", ".join(f"{ph} {r.flops_source.get(ph, 'counter')}" for ph in phases)
    moved = "weights read, activations in and out" + (", KV cache" if "decode" in phases else "")
    con.print(f"per layer: FLOPs per token ({src}); intensity = FLOPs / bytes of one step at batch 1 ({step}: "
              f"{moved})", highlight=False)
    head = [f"{ph} FLOP/token" for ph in phases] + [f"{ph} FLOP/byte" for ph in phases]
    head += [f"{ph} bound on {r.gpu}" for ph in phases] if r.bound_by_layer else []
    con.print("  " + f"{'layer':<14}" + "".join(f"{h:>{max(18, len(h) + 2)}}" for h in head), highlight=False)
    for name, cells in _layer_rows(r):
        con.print("  " + f"{name:<14}"
                  + "".join(f"{c:>{max(18, len(h) + 2)}}" for c, h in zip(cells, head, strict=True)),
                  highlight=False)


def _print_flops(con, r) -> None:
    if r.pooling:
        p = r.pooling
        con.print(f"Embedding model ({p['why']}): pooling {p['pooling']}{', normalized' if p['normalize'] else ''} "
                  f"(from {p['source']}); one prefill pass per input, no decode", highlight=False)
    if r.workload:
        w = r.workload
        cut = f"; {w['truncated']} truncated at {w['max_length']}" if w["truncated"] else ""
        con.print(f"FLOPs per input at the workload's lengths: {_si(w['flops_per_item_mean'], 'FLOP')} mean over "
                  f"{w['items']} inputs of {w['mean_tokens']:.0f} tokens mean, {w['max_tokens']} max "
                  f"({_si(w['flops_per_token'], 'FLOP')}/token; {w['lengths']}{cut})", highlight=False)
    for ph, fl in r.flops_per_token.items():
        if r.flops_source.get(ph) == "analytic":
            seen = r.flops_per_token_counter.get(ph)
            how = f"analytic count; the meta-tensor counter saw {_si(seen, 'FLOP')}" if seen else "analytic count"
        else:
            how = f"counted on meta tensors; analytic {_si(r.flops_per_token_analytic.get(ph, 0), 'FLOP')}"
        con.print(f"FLOPs per token, {ph} at {r.seq_len} tokens: {_si(fl, 'FLOP')} ({how}); attention share "
                  f"{100 * r.attention_flops_share[ph]:.1f}%", highlight=False)
    if r.task == "embed":
        con.print("KV cache: none (an embedding model runs one forward pass per input and keeps nothing)",
                  highlight=False)
    else:
        con.print(f"KV cache: {r.kv_bytes_per_token} bytes/token ({r.kv_layout}, head_dim {r.head_dim})",
                  highlight=False)


def inspect_cmd(
    model: Annotated[str, typer.Argument(help="model directory, config.json or alias (minilm)")],
    seq_len: Annotated[int, typer.Option(help="prompt length for prefill FLOPs and the decode step's cache")] = 512,
    sensitivity: Annotated[bool, typer.Option(
        help="per-layer int8 sensitivity (from --results, or measured for an embedding model)")] = False,
    results: Annotated[Path | None, typer.Option(help="tune results.json to read the sensitivity from")] = None,
    workload: Annotated[Path | None, typer.Option(
        help="an embedding model's inputs (JSONL or text) for FLOPs per input; default: the built-in sample")] = None,
    gpu: Annotated[str | None, typer.Option(
        help="a GPU (H100, L4, ...): whether each layer is memory- or compute-bound on it")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")] = False,
) -> None:
    """Parameters and bytes by module type and dtype; FLOPs per token by layer (prefill, decode) counted on
    meta tensors (no weights needed; the analytic count where the counter cannot be trusted or run), with each
    layer's bytes and arithmetic intensity; attention share of FLOPs; KV-cache bytes per token, or for an
    embedding model its pooling and FLOPs per input at the workload's lengths. The figures go to stdout; with
    --json, JSON goes there instead."""
    from infertune.extras import require

    require("inspect")
    from infertune.console import console
    from infertune.inspect import InspectConfig, inspect_model

    r = inspect_model(InspectConfig(model=model, seq_len=seq_len, sensitivity=sensitivity, results=results,
                                    workload=workload, gpu=gpu))
    con = console(stderr=as_json)
    con.print(f"[bold]{r.architecture}[/] ({r.model_type}): {_si(r.params, 'params')}, {r.bytes_total / 2**20:.1f} MiB "
              f"({r.dtype_source})", highlight=False)
    for t, n in sorted(r.params_by_module_type.items(), key=lambda kv: -kv[1]):
        con.print(f"  {t:<28}{_si(n, 'params'):>14}{r.bytes_by_module_type[t] / 2**20:>12.1f} MiB", highlight=False)
    by_dtype = ", ".join(f"{k} {_si(v, 'params')}" for k, v in r.params_by_dtype.items())
    con.print(f"  by dtype: {by_dtype}", highlight=False)
    _print_flops(con, r)
    _print_layers(con, r)
    for n in r.notes:
        con.print(f"[yellow]note:[/] {n}", highlight=False)
    for s in r.sensitivity[:10]:
        con.print(f"  sensitivity {s['layer']:<50} drop {s['drop']:.2e}", highlight=False)
    con.print(f"counted in {r.wall_s:.1f} s "
              f"({'meta device' if r.count_method == 'meta' else 'analytic, from config.json'})",
              highlight=False)
    if as_json:
        typer.echo(json.dumps(r.model_dump(mode="json"), indent=2))
