"""`infertune bench`: thin shell over infertune.bench.runner.bench()."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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


# each flag's type and help, so that bench_cmd's signature reads as the list of flags and their defaults
Url = Annotated[str, typer.Argument(help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000")]
Api = Annotated[str, typer.Option(help="embeddings | completions | chat")]
Model = Annotated[str | None, typer.Option(help="model name in requests (default: first of GET /v1/models)")]
Workload = Annotated[Path | None, typer.Option(
    help="JSONL: {\"input\": ...} or {\"prompt\"|\"messages\", \"max_tokens\"}")]
Synthetic = Annotated[str | None, typer.Option(help="e.g. 'prompt=lognormal(200,0.6),output=128'")]
InputsPerRequest = Annotated[int, typer.Option(
    help="embeddings: pack this many workload inputs into each "
         "request (a batch-indexing client; OpenAI allows 2048)")]
Concurrency = Annotated[str | None, typer.Option(help="closed loop: streams in flight, e.g. 1,4,16")]
Rate = Annotated[str | None, typer.Option(help="open loop: requests/s, e.g. 10,50,100")]
Arrivals = Annotated[str, typer.Option(help="constant or poisson (seeded)")]
Sweep = Annotated[bool, typer.Option(help="one-at-a-time, saturation, then rates in between")]
Slo = Annotated[str | None, typer.Option(
    help="search the highest load meeting e.g. 'p99_e2e_ms<=200': per-request latency, "
         "end to end from its scheduled send time (queueing included)")]
SloOver = Annotated[str, typer.Option(help="what the SLO search varies: rate or concurrency")]
SloKeepup = Annotated[float, typer.Option(
    help="rate search: a point also fails when completions in its window "
         "fall below this share of sends (a queue grew); 0 = off")]
SloRecheck = Annotated[bool, typer.Option(
    "--slo-recheck/--no-slo-recheck",
    help="search: measure a marginal failure (kept up with 88%+ of sends, "
         "latency within 2x the limit) once more before believing it")]
SloStart = Annotated[float | None, typer.Option(
    help="search: the first load to measure (default: the one-at-a-time rate, measured first)")]
SloStep = Annotated[float, typer.Option(
    help="search: bracketing factor; a small one (1.1) saves points when --slo-start is near "
         "the answer (below 2 it grows toward 2 while the boundary is not bracketed)")]
SloConfirm = Annotated[float, Duration(
    "search: re-measure its answer with points this long (a queue settles; short "
    "points end before it does) and back off 10% a step until one meets the SLO: "
    "the sustainable load, printed beside the short points' answer; 0 = off")]
PointDuration = Annotated[float, Duration("measured time per point")]
Warmup = Annotated[float, Duration("time per point sent but not counted")]
MaxRequests = Annotated[int | None, typer.Option(help="cap on measured requests per point")]
Stream = Annotated[bool | None, typer.Option(
    "--stream/--no-stream", help="stream completions/chat (default on)")]
Workers = Annotated[str, typer.Option(help="load processes: a number or auto")]
HttpClient = Annotated[str, typer.Option(
    help="auto (lean httptools client for non-streamed requests, ~3x less client CPU; aiohttp for "
         "streams), lean, or aiohttp")]
Timeout = Annotated[float, Duration("per-request timeout")]
WaitReady = Annotated[float | None, Duration(
    "before the first point, wait up to this long while the server refuses connections or answers 503 "
    "(loading), with a progress line; default 120 s for 503, 5 s for refused connections; 0 = no wait")]
MaxLagMs = Annotated[float, typer.Option(
    help="p99 schedule lag that marks a point invalid (ms)")]
MaxErrorRate = Annotated[float, typer.Option(
    help="share of failed requests above which a point is error-laden: "
         "not valid, never quoted as throughput, fails any SLO")]
MetricsUrl = Annotated[str | None, typer.Option(
    help="Prometheus URL to scrape (default URL/metrics; '' = off)")]
Seed = Annotated[int, typer.Option(help="seed for arrivals and synthetic prompts")]
Out = Annotated[Path | None, typer.Option(help="write bench.json, bench.html, bench.csv here")]
SaveRequests = Annotated[bool, typer.Option(help="keep per-request records in bench.json")]
AsJson = Annotated[bool, typer.Option("--json", help="print bench.json to stdout; humans read stderr")]
Compare = Annotated[list[str] | None, typer.Option(
    help="embeddings: also measure this server (repeatable, NAME=URL or URL) side by "
         "side with URL on the same texts, in rounds whose order rotates; prints items/s "
         "(median, range, n), P99 and cosine of the answers against URL's")]
Rounds = Annotated[int, typer.Option(help="with --compare: rounds per server")]
Ceiling = Annotated[str | None, typer.Option(
    help="embeddings: hold the server against its forward-only ceiling, a `serve MODEL --ceiling --json` file or "
         "items/s: each point reports served items/s as a fraction of it")]


def bench_cmd(
    url: Url,
    api: Api = D["api"],
    model: Model = None,
    workload: Workload = None,
    synthetic: Synthetic = None,
    inputs_per_request: InputsPerRequest = D["inputs_per_request"],
    concurrency: Concurrency = None,
    rate: Rate = None,
    arrivals: Arrivals = D["arrivals"],
    sweep: Sweep = D["sweep"],
    slo: Slo = None,
    slo_over: SloOver = D["slo_over"],
    slo_keepup: SloKeepup = D["slo_keepup"],
    slo_recheck: SloRecheck = D["slo_recheck"],
    slo_start: SloStart = None,
    slo_step: SloStep = D["slo_step"],
    slo_confirm: SloConfirm = D["slo_confirm"],
    duration: PointDuration = D["duration"],
    warmup: Warmup = D["warmup"],
    max_requests: MaxRequests = None,
    stream: Stream = None,
    workers: Workers = D["workers"],
    http_client: HttpClient = D["http_client"],
    timeout: Timeout = D["timeout"],
    wait_ready: WaitReady = None,
    max_lag_ms: MaxLagMs = D["max_lag_ms"],
    max_error_rate: MaxErrorRate = D["max_error_rate"],
    metrics_url: MetricsUrl = None,
    seed: Seed = D["seed"],
    out: Out = None,
    save_requests: SaveRequests = D["save_requests"],
    as_json: AsJson = False,
    compare: Compare = None,
    rounds: Rounds = 3,
    ceiling: Ceiling = None,
) -> None:
    """Load-test an OpenAI-compatible server: latency percentiles from each request's scheduled send time,
    TTFT/ITL/TPOT for streams, errors by kind, the server's /metrics alongside, and a client self-check
    that marks points where the load generator itself could not keep up. Bench first waits for a server
    that is still loading (--wait-ready); a point with more than 1% failed requests is error-laden: not
    valid, and never quoted as throughput or as an SLO answer."""
    flags = dict(locals())  # every parameter by name, before any other local exists
    from infertune.extras import require

    require("bench")
    from infertune.bench.report import print_summary, to_json
    from infertune.bench.runner import bench
    from infertune.console import console

    _check_choices(api, arrivals, slo_over, http_client, workers)
    if compare:
        _compare(url, compare, api, workload, concurrency, duration, warmup, rounds, inputs_per_request, as_json)
        return
    cfg = _bench_config(flags)
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


def _check_choices(api: str, arrivals: str, slo_over: str, http_client: str, workers: str) -> None:
    """Refuse (InfertuneError) a flag value outside its choices."""
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


def _bench_config(f: dict[str, Any]) -> BenchConfig:
    """The BenchConfig that bench_cmd's flags (`f`, by parameter name) describe."""
    return BenchConfig(
        url=f["url"], api=f["api"], model=f["model"], workload=f["workload"], synthetic=f["synthetic"],
        inputs_per_request=f["inputs_per_request"], stream=f["stream"],
        concurrency=_nums(f["concurrency"], int, "--concurrency"), rates=_nums(f["rate"], float, "--rate"),
        arrivals=f["arrivals"], sweep=f["sweep"], slo=f["slo"], slo_over=f["slo_over"], slo_keepup=f["slo_keepup"],
        slo_recheck=f["slo_recheck"], slo_start=f["slo_start"], slo_step=f["slo_step"],
        slo_confirm=f["slo_confirm"], wait_ready=f["wait_ready"], duration=f["duration"], warmup=f["warmup"],
        max_requests=f["max_requests"], workers="auto" if f["workers"] == "auto" else int(f["workers"]),
        timeout=f["timeout"], max_lag_ms=f["max_lag_ms"], max_error_rate=f["max_error_rate"],
        metrics_url=f["metrics_url"], seed=f["seed"], out=f["out"], save_requests=f["save_requests"],
        http_client=f["http_client"], ceiling=f["ceiling"],
    )


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
