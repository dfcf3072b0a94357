"""`infertune verify`: thin shell over infertune.tasks.embedding.reverify.verify()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from infertune.cli.options import Duration, config_defaults
from infertune.tasks.embedding.reverify import VerifyConfig

# flags whose default VerifyConfig holds -> that field (tests/unit/cli/test_cli_defaults.py holds them equal)
CONFIG_FIELDS = {name: (VerifyConfig, name)
                 for name in ("max_slowdown", "passes", "out", "lm_duration_s", "accuracy_only")}
D = config_defaults(CONFIG_FIELDS)
FAILED_EXIT = 1  # accuracy outside the artifact's budget, or speed below (1 - --max-slowdown) x tune's


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cmd)


def verify_cmd(
    artifact: Annotated[Path, typer.Argument(help="a `tune` artifact directory (embedding, or a causal LM served "
                                                       "by vLLM)")],
    workload: Annotated[Path | None, typer.Option(
        help="measure speed on these texts (JSONL or text, as tune reads) instead of the held ones; the ratio is "
             "then against tune's eval-split figure")] = None,
    device: Annotated[str | None, typer.Option(help="cpu or cuda (default: the artifact's)")] = None,
    max_slowdown: Annotated[float, typer.Option(
        help="fail when speed drops more than this fraction below the tune-time figure")] = D["max_slowdown"],
    passes: Annotated[int, typer.Option(help="timed passes (after one warm-up pass)")] = D["passes"],
    accuracy_only: Annotated[bool, typer.Option(
        "--accuracy-only", help="the accuracy check alone, no speed passes (a host too busy for a speed figure to "
                                "mean anything; what serve --verify runs)")] = D["accuracy_only"],
    lm_duration_s: Annotated[float, Duration(
        "causal LMs: how long the closed-loop load point at tune's concurrency runs", "--lm-duration")
    ] = D["lm_duration_s"],
    out: Annotated[Path, typer.Option(help="directory verify.json is written to")] = D["out"],
    as_json: Annotated[bool, typer.Option("--json", help="print verify.json on stdout, nothing else")] = False,
) -> None:
    """Prove a tuned embedding artifact again in this environment (after upgrading torch, ONNX Runtime, OpenVINO or
    moving hosts): its held texts' vectors against the stored fp32 reference per length bucket, under the artifact's
    accuracy budget; its speed against the tune-time figure measured the same way (a ratio, best of n passes, with
    the median and range); library versions, ISA flags and GPUs against the artifact's fingerprint.
    A causal-LM artifact served by vLLM: vLLM is started on it as `serve` does; its recorded greedy continuations
    are asked for one at a time and then all at once (answers must not depend on the batch), under the artifact's
    top-1 agreement budget; the request rate at tune's concurrency on tune's load is compared when tune measured it
    the same way.
    --accuracy-only leaves the speed half out.
    Exit codes: 0 verified; 1 accuracy outside the budget or speed below the tolerance; 2 bad input."""
    from infertune.console import console
    from infertune.errors import InfertuneError
    from infertune.tasks.embedding.reverify import speed_line, verify

    if device not in (None, "cpu", "cuda"):
        raise InfertuneError(f"--device must be cpu or cuda, not {device!r}")
    r = verify(VerifyConfig(artifact=artifact, workload=workload, device=device, max_slowdown=max_slowdown,
                            passes=passes, out=out, lm_duration_s=lm_duration_s,
                            accuracy_only=accuracy_only))
    con = console(stderr=as_json)
    if getattr(r, "kind", None) == "causal-lm":
        _print_lm(con, r)
        if as_json:
            typer.echo(json.dumps(r.model_dump(mode="json"), indent=2))
        if not r.ok:
            raise typer.Exit(FAILED_EXIT)
        return
    a = r.accuracy
    con.print(f"[bold]infertune verify[/] {r.artifact}: {r.model}, {r.candidate_id} on {r.device}", highlight=False)
    for b in a.buckets:
        con.print(f"  {b.bucket:>8} tokens: n={b.n:>3}, cosine vs reference mean {b.cosine_mean:.6f} min "
                  f"{b.cosine_min:.6f} {'ok' if b.ok else '[red]OUTSIDE BUDGET[/]'}", highlight=False)
    con.print(f"accuracy {'[green]ok[/]' if a.ok else '[red]FAILED[/]'}: mean cosine {a.cosine_mean:.6f}, min "
              f"{a.cosine_min:.6f} over n={a.n} held texts (budget mean >= {a.budget['min_cosine_mean']}, min >= "
              f"{a.budget['min_cosine_min']}){': ' + a.why if a.why else ''}", highlight=False)
    if accuracy_only:
        con.print("speed: not measured (--accuracy-only)", highlight=False)
    if (s := r.speed) is not None:
        con.print(f"speed {'[green]ok[/]' if s.ok else '[red]FAILED[/]'}: {speed_line(s)}", highlight=False)
        if s.note:
            con.print(f"[dim]note: {s.note}[/]", highlight=False)
    _print_verdict(con, r)
    if as_json:
        typer.echo(json.dumps(r.model_dump(mode="json"), indent=2))
    if not r.ok:
        raise typer.Exit(FAILED_EXIT)


def _print_lm(con, r) -> None:
    """The console lines of a causal-LM verification."""
    from infertune.tasks.causal_lm.reverify import batch_line, greedy_line

    con.print(f"[bold]infertune verify[/] {r.artifact}: {r.model}, {r.candidate_id} served by vLLM on {r.device} "
              f"(started in {r.start_s:.0f} s)", highlight=False)
    con.print(f"greedy {'[green]ok[/]' if r.greedy.ok else '[red]FAILED[/]'}: {greedy_line(r.greedy)}", highlight=False)
    con.print(f"batch {'[green]ok[/]' if r.batch.ok else '[red]FAILED[/]'}: {batch_line(r.batch)}", highlight=False)
    if (s := r.speed) is not None:
        con.print(f"speed {'[green]ok[/]' if s.ok else '[red]FAILED[/]'}: {s.note}", highlight=False)
    _print_verdict(con, r)


def _print_verdict(con, r) -> None:
    """The lines every verification ends with, embedding or causal LM: the environment against the artifact's
    fingerprint, then the verdict."""
    con.print(f"environment: {'same as the artifact' if not r.environment_diff else 'differs from the artifact'}",
              highlight=False)
    for line in r.environment_diff:
        con.print(f"  {line}", highlight=False)
    con.print(f"{'[green]verified[/]' if r.ok else '[red]NOT verified[/]: ' + '; '.join(r.failures)} "
              f"in {r.wall_s:.1f} s; wrote {r.path}", highlight=False)
