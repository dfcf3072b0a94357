"""`infertune bench`: thin shell over infertune.bench.runner.bench()."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from infertune.bench.config import BenchConfig
from infertune.cli.options import Duration, config_defaults

# flags whose default BenchConfig holds -> that field (tests/unit/cli/test_cli_defaults.py holds them equal)
CONFIG_FIELDS = {name: (BenchConfig, name) for name in (
    "api", "inputs_per_request", "arrivals", "sweep", "slo_over", "slo_keepup", "slo_recheck", "slo_step",
    "slo_confirm", "duration", "warmup", "workers", "http_client", "timeout", "max_lag_ms", "max_error_rate", "seed",
    "save_requests")}
D = config_defaults(CONFIG_FIELDS)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_cmd)


def _nums(text: str | None, kind: type, flag: str) -> list:
    from infertune.errors import InfertuneError

    if not text:
        return []
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InfertuneError(f"{flag} takes comma-separated numbers, e.g. {flag} 1,4,16; got {text!r}") from None


def bench_cmd(
    url: Annotated[str, typer.Argument(help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000")],
    api: Annotated[str, typer.Option(help="embeddings | completions | chat")] = D["api"],
    model: Annotated[str | None, typer.Option(help="model name in requests (default: first of GET /v1/models)")] = None,
    workload: Annotated[Path | None, typer.Option(
        help="JSONL: {\"input\": ...} or {\"prompt\"|\"messages\", \"max_tokens\"}")] = None,
    synthetic: Annotated[str | None, typer.Option(help="e.g. 'prompt=lognormal(200,0.6),output=128'")] = None,
    inputs_per_request: Annotated[int, typer.Option(
        help="embeddings: pack this many workload inputs into each "
             "request (a batch-indexing client; OpenAI allows 2048)")] = D["inputs_per_request"],
    concurrency: Annotated[str | None, typer.Option(help="closed loop: streams in flight, e.g. 1,4,16")] = None,
    rate: Annotated[str | None, typer.Option(help="open loop: requests/s, e.g. 10,50,100")] = None,
    arrivals: Annotated[str, typer.Option(help="constant or poisson (seeded)")] = D["arrivals"],
    sweep: Annotated[bool, typer.Option(help="one-at-a-time, saturation, then rates in between")] = D["sweep"],
    slo: Annotated[str | None, typer.Option(
        help="search the highest load meeting e.g. 'p99_e2e_ms<=200': per-request latency, "
             "end to end from its scheduled send time (queueing included)")] = None,
    slo_over: Annotated[str, typer.Option(help="what the SLO search varies: rate or concurrency")] = D["slo_over"],
    slo_keepup: Annotated[float, typer.Option(
        help="rate search: a point also fails when completions in its window "
             "fall below this share of sends (a queue grew); 0 = off")] = D["slo_keepup"],
    slo_recheck: Annotated[bool, typer.Option(
        "--slo-recheck/--no-slo-recheck",
        help="search: measure a marginal failure (kept up with 88%+ of sends, "
             "latency within 2x the limit) once more before believing it")] = D["slo_recheck"],
    slo_start: Annotated[float | None, typer.Option(
        help="search: the first load to measure (default: the one-at-a-time rate, measured first)")] = None,
    slo_step: Annotated[float, typer.Option(
        help="search: bracketing factor; a small one (1.1) saves points when --slo-start is near "
             "the answer (below 2 it grows toward 2 while the boundary is not bracketed)")] = D["slo_step"],
    slo_confirm: Annotated[float, Duration(
        "search: re-measure its answer with points this long (a queue settles; short "
        "points end before it does) and back off 10% a step until one meets the SLO: "
        "the sustainable load, printed beside the short points' answer; 0 = off")] = D["slo_confirm"],
    duration: Annotated[float, Duration("measured time per point")] = D["duration"],
    warmup: Annotated[float, Duration("time per point sent but not counted")] = D["warmup"],
    max_requests: Annotated[int | None, typer.Option(help="cap on measured requests per point")] = None,
    stream: Annotated[bool | None, typer.Option(
        "--stream/--no-stream", help="stream completions/chat (default on)")] = None,
    workers: Annotated[str, typer.Option(help="load processes: a number or auto")] = D["workers"],
    http_client: Annotated[str, typer.Option(
        help="auto (lean httptools client for non-streamed requests, ~3x less client CPU; aiohttp for "
             "streams), lean, or aiohttp")] = D["http_client"],
    timeout: Annotated[float, Duration("per-request timeout")] = D["timeout"],
    wait_ready: Annotated[float | None, Duration(
        "before the first point, wait up to this long while the server refuses connections or answers 503 "
        "(loading), with a progress line; default 120 s for 503, 5 s for refused connections; 0 = no wait")] = None,
    max_lag_ms: Annotated[float, typer.Option(
        help="p99 schedule lag that marks a point invalid (ms)")] = D["max_lag_ms"],
    max_error_rate: Annotated[float, typer.Option(
        help="share of failed requests above which a point is error-laden: "
             "not valid, never quoted as throughput, fails any SLO")] = D["max_error_rate"],
    metrics_url: Annotated[str | None, typer.Option(
        help="Prometheus URL to scrape (default URL/metrics; '' = off)")] = None,
    seed: Annotated[int, typer.Option(help="seed for arrivals and synthetic prompts")] = D["seed"],
    out: Annotated[Path | None, typer.Option(help="write bench.json, bench.html, bench.csv here")] = None,
    save_requests: Annotated[bool, typer.Option(help="keep per-request records in bench.json")] = D["save_requests"],
    as_json: Annotated[bool, typer.Option("--json", help="print bench.json to stdout; humans read stderr")] = False,
    compare: Annotated[list[str] | None, typer.Option(
        help="embeddings: also measure this server (repeatable, NAME=URL or URL) side by "
             "side with URL on the same texts, in rounds whose order rotates; prints items/s "
             "(median, range, n), P99 and cosine of the answers against URL's")] = None,
    rounds: Annotated[int, typer.Option(help="with --compare: rounds per server")] = 3,
) -> None:
    """Load-test an OpenAI-compatible server: latency percentiles from each request's scheduled send time,
    TTFT/ITL/TPOT for streams, errors by kind, the server's /metrics alongside, and a client self-check
    that marks points where the load generator itself could not keep up. Bench first waits for a server
    that is still loading (--wait-ready); a point with more than 1% failed requests is error-laden: not
    valid, and never quoted as throughput or as an SLO answer."""
    from infertune.extras import require

    require("bench")
    from infertune.bench.config import BenchConfig
    from infertune.bench.report import print_summary, to_json
    from infertune.bench.runner import bench
    from infertune.console import console
    from infertune.errors import InfertuneError

    if api not in ("embeddings", "completions", "chat"):
        raise InfertuneError(f"--api must be embeddings, completions or chat, not {api!r}")
    if arrivals not in ("constant", "poisson"):
        raise InfertuneError(f"--arrivals must be constant or poisson, not {arrivals!r}")
    if slo_over not in ("rate", "concurrency"):
        raise InfertuneError(f"--slo-over must be rate or concurrency, not {slo_over!r}")
    if http_client not in ("auto", "lean", "aiohttp"):
        raise InfertuneError(f"--http-client must be auto, lean or aiohttp, not {http_client!r}")
    if workers != "auto" and not workers.isdigit():
        raise InfertuneError(f"--workers takes a number or 'auto', not {workers!r}")
    if compare:
        _compare(url, compare, api, workload, concurrency, duration, warmup, rounds, inputs_per_request, as_json)
        return
    cfg = BenchConfig(
        url=url, api=api, model=model, workload=workload, synthetic=synthetic, inputs_per_request=inputs_per_request,
        stream=stream,
        concurrency=_nums(concurrency, int, "--concurrency"), rates=_nums(rate, float, "--rate"), arrivals=arrivals,
        sweep=sweep, slo=slo, slo_over=slo_over, slo_keepup=slo_keepup, slo_recheck=slo_recheck, slo_start=slo_start,
        slo_step=slo_step, slo_confirm=slo_confirm, wait_ready=wait_ready, duration=duration, warmup=warmup,
        max_requests=max_requests,
        workers="auto" if workers == "auto" else int(workers), timeout=timeout, max_lag_ms=max_lag_ms,
        max_error_rate=max_error_rate,
        metrics_url=metrics_url, seed=seed, out=out, save_requests=save_requests, http_client=http_client,
    )
    con = console(stderr=True)
    result = bench(cfg, log=lambda s: con.print(s, markup=False))
    print_summary(result)
    if as_json:
        typer.echo(to_json(result))
    total = sum(p.n for p in result.points)
    if total and sum(p.errors.total for p in result.points) == total:
        kinds = sorted({k for p in result.points for k in p.errors.by_kind})
        con.print(f"[bold red]every request failed ({', '.join(kinds)}); see the messages above[/]")
        raise typer.Exit(1)


def _compare(url, compare, api, workload, concurrency, duration, warmup, rounds, per_request, as_json) -> None:
    import json

    from infertune.console import console
    from infertune.errors import InfertuneError
    from infertune.tasks.embedding.peers import compare as run_compare
    from infertune.tasks.embedding.peers import table
    from infertune.workloads.texts import load_workload

    if api != "embeddings":
        raise InfertuneError("--compare measures embedding servers (--api embeddings)")
    conc = _nums(concurrency, int, "--concurrency") or [16]
    if len(conc) != 1:
        raise InfertuneError("--compare takes one --concurrency")
    servers = {url: url}  # the first server is named by its URL; the others NAME=URL, or "server N"
    for i, item in enumerate(compare, start=2):
        name, sep, u = item.partition("=")
        named = bool(sep) and not name.startswith("http")
        servers[name if named else f"server {i}"] = u if named else item
    con = console(stderr=True)
    got = run_compare(servers, load_workload(str(workload) if workload else None).items, concurrency=conc[0],
                      duration=duration, warmup=warmup, rounds=rounds, inputs_per_request=per_request,
                      progress=lambda s: con.print(s, markup=False))
    typer.echo(json.dumps([r.model_dump() for r in got], indent=2) if as_json else table(got))
