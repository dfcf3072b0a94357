"""`infertune export`: thin shell over infertune.export.run.export()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

FAILED_CHECK_EXIT = 3  # written, but the check found a bucket under --min-cosine (2 stays "bad input")


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)


def export_cmd(
    model: Annotated[str, typer.Argument(
        help="alias (minilm), model directory, Hub id in the local cache, or a .pt/.pth file")],
    to: Annotated[str, typer.Option(help="onnx or openvino")] = "onnx",
    workload: Annotated[Path | None, typer.Option(
        help="inputs for the check and the TensorRT shapes (JSONL or "
             "text, as tune reads); default: the built-in sample")] = None,
    out: Annotated[Path | None, typer.Option(help="output directory (default exports/<model>-<format>)")] = None,
    config: Annotated[Path | None, typer.Option(
        help="for a state_dict .pt: the model's directory with config.json and tokenizer")] = None,
    tokenizer: Annotated[Path | None, typer.Option(
        help="for a TorchScript .pt: its tokenizer directory (default: the .pt's directory)")] = None,
    pooling: Annotated[str | None, typer.Option(
        help="mean|cls|max|last (default: the model's own; mean for a TorchScript encoder)")] = None,
    task: Annotated[str | None, typer.Option(help="embed or generate, when the model's files do not say")] = None,
    opset: Annotated[int, typer.Option(help="ONNX opset")] = 17,
    min_cosine: Annotated[float, typer.Option(
        help="every checked input's cosine vs the original must reach this")] = 0.9999,
    precision: Annotated[str, typer.Option(help="TensorRT script: fp16|bf16|int8|fp32")] = "fp16",
    batch_tokens: Annotated[int, typer.Option(
        help="TensorRT script: padded tokens per batch the profiles are sized for")] = 16384,
    as_json: Annotated[bool, typer.Option("--json", help="print report.json on stdout")] = False,
) -> None:
    """Write the model as ONNX or OpenVINO IR with report.json (cosine per length bucket against the original on
    the workload, opset, dynamic axes, inputs) and, for ONNX, tensorrt.sh: the trtexec build with one profile per
    length bucket. A causal LM gets tensorrt-llm.sh (checkpoint, trtllm-build, trtllm-serve) instead.
    Exit codes: 0 written and checked; 2 bad input; 3 written, but a bucket's cosine is under --min-cosine."""
    from infertune.console import console
    from infertune.errors import InfertuneError
    from infertune.export.run import ExportConfig, export

    if to not in ("onnx", "openvino"):
        raise InfertuneError(f"--to must be onnx or openvino, not {to!r}")
    r = export(ExportConfig(model=model, to=to, workload=workload, out=out, config=config, tokenizer=tokenizer,
                            pooling=pooling, task=task, opset=opset, min_cosine=min_cosine, precision=precision,
                            batch_tokens=batch_tokens))
    con = console(stderr=as_json)
    what = r.path or "no model file (a causal LM)"
    con.print(f"[bold]{r.model}[/] ({r.source}) -> {what}; opset {r.opset}, inputs {', '.join(r.inputs) or '-'}",
              highlight=False)
    for b in r.buckets:
        con.print(f"  {b.bucket:>8} tokens: {b.items:>3} inputs in {b.batches} padded batches, cosine min "
                  f"{b.min_cosine:.7f} mean {b.mean_cosine:.7f}", highlight=False)
    if r.min_cosine is not None:
        verdict = "[green]passed[/]" if r.passed else "[red]FAILED[/]"
        con.print(f"check {verdict}: min cosine {r.min_cosine:.7f} (needs >= {r.min_cosine_required}) over "
                  f"{sum(b.items for b in r.buckets)} inputs of {r.workload}", highlight=False)
    for n in r.notes:
        con.print(f"[dim]note: {n}[/]", highlight=False)
    con.print(f"wrote {r.out}/: {', '.join(r.files)} in {r.wall_s:.1f} s", highlight=False)
    if as_json:
        typer.echo(json.dumps(r.model_dump(mode="json"), indent=2))
    if not r.passed:
        raise typer.Exit(FAILED_CHECK_EXIT)
