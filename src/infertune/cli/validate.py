"""`infertune validate`: thin shell over infertune.validate.runner.validate()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from infertune.cli.options import Duration, commas, config_defaults, duration_text, stop_on_sigterm
from infertune.validate.config import ValidateConfig

# flags whose default ValidateConfig holds -> that field (tests/unit/cli/test_cli_defaults.py holds them equal)
CONFIG_FIELDS = {
    "slo": (ValidateConfig, "slo"),
    "soak": (ValidateConfig, "soak_s", duration_text),
    "soak_fraction": (ValidateConfig, "soak_fraction"),
    "soak_margin": (ValidateConfig, "soak_margin"),
    "faults": (ValidateConfig, "faults", commas),
    "long_tail": (ValidateConfig, "long_tail"),
    "max_error_rate": (ValidateConfig, "max_error_rate"),
    "max_rss_slope": (ValidateConfig, "max_rss_slope_mb_h"),
    "max_p99_drift": (ValidateConfig, "max_p99_drift"),
    "recovery_budget": (ValidateConfig, "recovery_budget_s"),
    "burst_factor": (ValidateConfig, "burst_factor"),
    "burst": (ValidateConfig, "burst_s", duration_text),
    "step": (ValidateConfig, "step_s", duration_text),
    "search_duration": (ValidateConfig, "search_duration_s", duration_text),
    "sample_interval": (ValidateConfig, "sample_interval_s"),
    "timeout": (ValidateConfig, "timeout_s"),
    "seed": (ValidateConfig, "seed"),
}
D = config_defaults(CONFIG_FIELDS)

HELP = """Production-readiness drills against an embedding (or LLM) server, with a pass/fail verdict and the evidence.

TARGET is a `tune` artifact / model (validate starts `infertune serve TARGET --worker-process` itself and stops it after) or the URL of a running server (drills that need its processes are skipped, and say why).

\b
Drills:
  soak         --soak-fraction (0.8) x peak for --soak; errors, P99 drift per window, RSS slope (MB/h)
  long-tail    workload p50/p90/p99 lengths + over-limit input, mixed, at 0.25-1 x peak; P99 knee per bucket
  kill-worker  SIGKILL the model worker under load: recovery time, failed requests, no hangs
  stall        SIGSTOP the worker: new requests are refused at once (429, or 503 once the engine is quiet past
               their deadline), never left waiting: the max and P99 wait of the refused ones are reported
  burst        --burst-factor (10) x peak for --burst: 429s instead of unbounded latency, healthy after
  oom-guard    oversized requests get 4xx, the largest legal batch is answered
  finite-output  workload texts and adversarial inputs (long repeats, odd unicode, empty-ish), alone and
               together: no NaN or Inf answered, no input refused as non-finite

\b
Examples:
  infertune validate runs/quick/artifact --soak 10m --out runs/validate
  infertune validate http://127.0.0.1:8000 --peak 50 --soak 2m --faults burst,oom-guard

The peak: --peak, or the highest rate bench's SLO search confirmed (its answer passed every repeat). When
the answer did not repeat, the soak runs at the highest rate that passed every time it ran, and the
console and validate.json (peak.basis) say so; when no rate repeated, validate refuses (exit 2).

The soak's rate: --soak-fraction x the peak, confirmed first with a point long enough for the queue to
settle (--soak-confirm, a quarter of the soak, 5-60 s), backing off 10% a step until one meets --slo with
margin: its latency limits x --soak-margin (0.8: P99 <= 160 ms for p99_e2e_ms<=200). The soak runs at that
sustainable rate, reported beside the short-point peak (peak.sustainable_rps). "Degrades" is said only for a
measured trend beyond the confirm point's spread: window P99, queue depth or memory rising over the soak
(Theil-Sen slope, p < 0.05 by permutation) by more than the confirm point's own max - min; otherwise a soak
that missed its SLO FAILs naming the measured cause (slower from the start, a slow spell, a busy host) with
its figures. No rate holds: validate refuses (exit 2). With --peak there is no confirm unless asked.

\b
Exit codes:
  0  every drill that ran passed, the soak's latency within --slo
  1  a drill failed (errors, a leak, P99 drift, a hang, no recovery, ...)
  2  a usage error, or nothing answers at the URL
  4  the server held up, but the soak's latency broke --slo (SLO NOT MET: not a PASS)"""  # noqa: E501


def register(app: typer.Typer) -> None:
    app.command("validate", help=HELP)(validate_cmd)


# flags whose default depends on the server (an LLM's: validate.config.point_s, engine_kill.budget): left out of the
# config when not given on the command line, so the config knows they were not chosen
SERVER_DEFAULTS = {"recovery_budget": "recovery_budget_s", "step": "step_s", "search_duration": "search_duration_s"}


def _given_only(ctx: typer.Context, **kw):
    for flag, field in SERVER_DEFAULTS.items():
        src = ctx.get_parameter_source(flag)
        if src is not None and src.name == "DEFAULT":
            kw.pop(field)
    return kw


def _faults(text: str) -> list[str]:
    from infertune.errors import InfertuneError
    from infertune.validate.config import FAULTS

    if text.strip().lower() in ("", "none"):
        return []
    got = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in got if x not in FAULTS]
    if bad:
        raise InfertuneError(f"unknown fault {bad[0]!r}; choose from {', '.join(FAULTS)} (comma-separated) or none")
    return got


def validate_cmd(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(help="artifact / model to serve, or http(s) URL of a running server")],
    peak: Annotated[float | None, typer.Option(help="peak req/s (default: found by bench's SLO search)")] = None,
    slo: Annotated[str, typer.Option(
        help="per-request SLO, end to end as a client sees it (queueing included): the peak "
             "search's target and the soak's bound (a soak over it exits 4)")] = D["slo"],
    soak: Annotated[float, Duration("soak duration (0 = no soak)")] = D["soak"],
    soak_fraction: Annotated[float, typer.Option(
        help="soak rate as a fraction of the peak (the rate the confirm point starts at)")] = D["soak_fraction"],
    soak_margin: Annotated[float, typer.Option(
        help="the confirm point must meet --slo's latency limits times this (0.8: P99 <= 160 ms for "
             "p99_e2e_ms<=200), so the soak runs with room under the SLO; 1 = no margin")] = D["soak_margin"],
    soak_confirm: Annotated[float | None, Duration(
        "before the soak, confirm its rate with a point this long (the queue settles) and "
        "back off 10% a step until one meets --slo; the soak runs there. Default: soak/4 "
        "within 5-60 s when the peak is searched, none with --peak; 0 = off")] = None,
    faults: Annotated[str, typer.Option(
        help="kill-worker,stall,burst,oom-guard,finite-output (or none)")] = D["faults"],
    long_tail: Annotated[bool, typer.Option(
        "--long-tail/--no-long-tail", help="run the long-tail drill")] = D["long_tail"],
    workload: Annotated[Path | None, typer.Option(help="JSONL requests (default: the built-in sample)")] = None,
    out: Annotated[Path, typer.Option(
        help="write validate.json, validate.html (and the server log) here")] = Path("runs/validate"),
    max_queue: Annotated[int | None, typer.Option(help="--max-queue of the server validate starts")] = None,
    serve_arg: Annotated[list[str] | None, typer.Option(help="extra flag for `infertune serve` (repeat)")] = None,
    max_error_rate: Annotated[float, typer.Option(help="soak: allowed errors / requests")] = D["max_error_rate"],
    max_rss_slope: Annotated[float, typer.Option(help="soak: allowed RSS climb, MB/hour")] = D["max_rss_slope"],
    max_p99_drift: Annotated[float, typer.Option(help="soak: allowed last/first-third P99 ratio")] = D["max_p99_drift"],
    recovery_budget: Annotated[float, Duration("kill-worker: time to answer again")] = D["recovery_budget"],
    burst_factor: Annotated[float, typer.Option(help="burst rate as a multiple of the peak")] = D["burst_factor"],
    burst: Annotated[float, Duration("burst duration")] = D["burst"],
    stall: Annotated[float | None, Duration(
        "stall duration (default: long enough to fill the queue at the peak rate)")] = None,
    step: Annotated[float, Duration("measured time per long-tail point")] = D["step"],
    search_duration: Annotated[float, Duration("measured time per SLO-search point")] = D["search_duration"],
    sample_interval: Annotated[float, Duration("RSS / metrics sampling period")] = D["sample_interval"],
    timeout: Annotated[float, Duration("client timeout per request: longer counts as a hang")] = D["timeout"],
    seed: Annotated[int, typer.Option(help="seed for schedules")] = D["seed"],
    as_json: Annotated[bool, typer.Option("--json", help="print validate.json to stdout; humans read stderr")] = False,
) -> None:
    from infertune.extras import require

    require("validate" if target.startswith(("http://", "https://")) else "validate-start")
    from infertune.console import console
    from infertune.validate.config import ValidateConfig
    from infertune.validate.report import print_summary
    from infertune.validate.runner import validate

    cfg = ValidateConfig(**_given_only(
        ctx,
        target=target, peak=peak, slo=slo, soak_s=soak, soak_fraction=soak_fraction,
        soak_confirm_s=soak_confirm, soak_margin=soak_margin, long_tail=long_tail,
        faults=_faults(faults), workload=workload, out=out, max_queue=max_queue, serve_args=serve_arg or [],
        max_error_rate=max_error_rate, max_rss_slope_mb_h=max_rss_slope, max_p99_drift=max_p99_drift,
        recovery_budget_s=recovery_budget, burst_factor=burst_factor, burst_s=burst, stall_s=stall, step_s=step,
        search_duration_s=search_duration, sample_interval_s=sample_interval, timeout_s=timeout, seed=seed,
    ))
    stop_on_sigterm()  # the server validate started is stopped too
    con = console(stderr=True)
    result = validate(cfg, log=lambda s: con.print(s, markup=False))
    print_summary(result)
    if result.peak.get("note"):  # the peak soaked is not the search's answer: said again next to the verdict
        con.print(f"peak: {result.peak['note']}", markup=False)
    style = {0: "bold green", 4: "bold yellow"}.get(result.exit_code, "bold red")
    con.print(f"verdict: {result.verdict} (exit {result.exit_code})", style=style, markup=False)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), indent=1))
    if result.exit_code:
        raise typer.Exit(result.exit_code)
