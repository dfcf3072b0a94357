"""`infertune serve`: thin shell over infertune.serve.app.serve()."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from infertune.cli.options import Duration, config_defaults
from infertune.serve.config import ServeConfig

# flags whose default ServeConfig holds -> that field (tests/unit/cli/test_cli_defaults.py holds them equal)
CONFIG_FIELDS = {name: (ServeConfig, name) for name in (
    "model", "host", "port", "max_queue", "max_items_per_request", "request_timeout_s", "truncate",
    "graceful_timeout_s", "drain_s", "strict_host", "verify", "log_level", "worker_process", "worker_timeout_s")}
CONFIG_FIELDS["max_body_mb"] = (ServeConfig, "max_body_bytes", lambda b: b / (1024 * 1024))
D = config_defaults(CONFIG_FIELDS)

HELP = """Serve an embedding model over an OpenAI-compatible HTTP API, with dynamic batching.

MODEL is a `tune` artifact directory (batching is then sized from its measurements), a sentence-transformers / Hugging Face encoder directory, a decoder embedder (e.g. Qwen3-Embedding; a plain *ForCausalLM directory needs --task embed unless its name says embedding), or an alias (minilm) served untuned.

Beyond OpenAI's fields, a request may send "dimensions": N (1..full size: the first N dims, renormalised, Matryoshka style) and "prompt_name": NAME (one of the model's instruction prompts, prepended to every text, as TEI does; see /v1/models for the names).

\b
Routes:
  POST /v1/embeddings   OpenAI shape: {"model": ..., "input": "text" | ["a", "b"] | [101, 7592] (token ids) | [[101], [7592]], "encoding_format": "float" | "base64"}
  GET  /v1/models       the served model (its id is the "model" to send)
  GET  /health          alive;  GET /ready: loaded and warmed up (route traffic after this)
  GET  /metrics         Prometheus: requests, latency, queue depth, batch size/tokens, padding, stage times

\b
Examples:
  infertune serve runs/latest/artifact        # tuned: batching sized from the artifact
  infertune serve minilm --port 8080          # untuned MiniLM, fp32
  curl -s localhost:8000/v1/embeddings -H 'Content-Type: application/json' -d '{"model": "minilm", "input": ["hello", "world"]}'

Batching: items are tokenized, length-sorted within a short window and packed while items x longest <= --batch-tokens (and, on CPU, padded/real tokens <= --max-padding), waiting at most --max-wait-ms for company.

Admission: a request is refused at once, never left to wait past its deadline (--max-wait-s, or the request's header X-Infertune-Deadline-Ms: 2000): 429 with Retry-After when the work queued ahead of it (tokens outstanding / the engine's measured tokens/s) is expected to take longer, or when --max-queue requests are in flight; 503 when the engine has work and finished nothing for longer than the deadline (stalled). --rate-limit N/s caps each --api-key. Over-length input gets 400 naming the limit unless --truncate. SIGTERM/SIGINT: /ready fails, connections are still accepted for --drain-s, then everything accepted is answered and the process exits 0 (a second signal stops at once).

Processes: on CPU one process by default (HTTP + tokenizer threads + the model). With --frontends N (default on GPUs: all cores but two per GPU and two more, at most 12 per GPU) N frontend processes share the port (HTTP, JSON, tokenization, rendering) and one engine process per device (--devices) owns the model and the batching; a dead engine is restarted, /metrics adds up every process. --ceiling measures the forward-only items/s to compare a bench run with."""  # noqa: E501


def parse_rate(text: str) -> float:
    from infertune.serve.limits import parse_rate as parse

    return parse(text)


def parse_prompts(items: list[str] | None) -> dict[str, str]:
    from infertune.errors import InfertuneError

    out = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise InfertuneError("--prompt takes NAME=TEXT "
                                 f"(e.g. --prompt 'query=Instruct: find the answer\\nQuery:'), got {item!r}")
        out[name.strip()] = text.encode().decode("unicode_escape") if "\\n" in text else text
    return out


def register(app: typer.Typer) -> None:
    app.command("serve", help=HELP)(serve_cmd)


# each flag's type and help, so that serve_cmd's signature reads as the list of flags and their defaults
Model = Annotated[str, typer.Argument(help="tune artifact dir, encoder dir, or alias (minilm)")]
Host = Annotated[str, typer.Option(help="interface to bind; loopback unless you mean to expose it")]
Port = Annotated[int, typer.Option(help="TCP port (0 = any free port, printed at start)")]
Device = Annotated[str | None, typer.Option(help="cpu or cuda (default: the artifact's device, else cpu)")]
ApiKey = Annotated[list[str] | None, typer.Option(
    envvar="INFERTUNE_API_KEY",
    help="require 'Authorization: Bearer KEY' on all routes but /health; repeat it (or separate keys with commas) "
         "for several clients, each with its own --rate-limit bucket and its own /metrics label (its position: "
         "1, 2, ...; never the key). Env INFERTUNE_API_KEY (keys separated by commas or spaces)")]
RateLimit = Annotated[str | None, typer.Option(
    help="per API key: N/s, N/min or N/h, e.g. 20/s. A token bucket per key: bursts of up to one second's worth, "
         "then N per second; over it the request gets 429 with Retry-After (seconds until the bucket refills one), "
         "counted in infertune_api_key_requests_total{key,outcome}. Needs --api-key; with --frontends F each "
         "frontend enforces it, so one key may reach F x N")]
MaxWaitS = Annotated[float | None, Duration(
    "a request's deadline, unless it sends its own in the header X-Infertune-Deadline-Ms. Admission divides the "
    "tokens queued and in flight by the engine's measured service rate (tokens/s, averaged over its busy time): "
    "a request expected to wait longer than its deadline gets 429 at once with Retry-After (the seconds until the "
    "queue is expected to have drained enough); with work queued and no rows finished for longer than the "
    "deadline (a stalled engine) it gets 503 at once; admitted requests run to completion (or "
    "--request-timeout-s). Default: 10x the artifact's P99 SLO (at least 1 s), else 10 s. /metrics: "
    "infertune_expected_wait_seconds, infertune_rejected_total{reason}", "--max-wait-s")]
ServedModelName = Annotated[str | None, typer.Option(
    help="model id clients send (default: the model's name)")]
BatchTokens = Annotated[int | None, typer.Option(
    help="padded-token budget per forward pass (default: from the artifact, else 4096 cpu / 16384 cuda)")]
MaxBatchItems = Annotated[int | None, typer.Option(
    help="cap on items per forward pass (default: artifact, else 256)")]
MaxBatchTokens = Annotated[int | None, typer.Option(
    help="under load (more ready items than one --batch-tokens budget) batches grow "
         "up to this; default 4x --batch-tokens on CUDA, no growth on CPU")]
MaxWaitMs = Annotated[float | None, typer.Option(
    help="max time an item waits for a fuller batch (default: 10% of the "
         "artifact's p50 batch time, else 5 ms cpu / 2 ms cuda)")]
MaxPadding = Annotated[float | None, typer.Option(
    help="close a batch before padded/real tokens pass this ratio (default 1.25 "
         "on cpu, where compute scales with padded tokens; off on cuda)")]
TokenizeWorkers = Annotated[int | None, typer.Option(help="tokenizer threads (default 1; 2 on 8+ cores)")]
Threads = Annotated[int | None, typer.Option(help="torch threads (default: what tune measured with)")]
MaxQueue = Annotated[int, typer.Option(help="requests in flight before new ones get 429")]
MaxItemsPerRequest = Annotated[int, typer.Option(
    help="items per request (OpenAI allows 2048)")]
MaxBodyMb = Annotated[float, typer.Option(help="request body limit in MiB (413 above)")]
RequestTimeoutS = Annotated[float, Duration("per-request timeout (504 after)")]
Truncate = Annotated[bool, typer.Option(
    "--truncate/--reject-long",
    help="truncate over-length input to the model's limit instead of answering 400")]
GracefulTimeoutS = Annotated[float, Duration(
    "on SIGTERM, how long to wait for in-flight requests")]
DrainS = Annotated[float, Duration(
    "on SIGTERM, /ready fails at once but new connections are still accepted (and answered) for this "
    "long before the graceful shutdown, so a load balancer can stop routing here", "--drain-s")]
Frontends = Annotated[int | None, typer.Option(
    help="HTTP/tokenizer processes sharing the port (default 1 on CPU; on GPUs all cores but two per GPU and two "
         "more, <= 12 per GPU). More than one, or several --devices, runs the model in engine processes")]
Devices = Annotated[str | None, typer.Option(
    help="with --device cuda: GPUs to serve on, one engine process "
         "each, e.g. 0,1 (default: every visible GPU)")]
VerifyFlag = Annotated[bool, typer.Option(
    "--verify",
    help="an artifact: before serving, embed its held texts and check them against its stored reference vectors "
         "and accuracy budget (the accuracy half of `infertune verify`); refuse to start (exit 2) when they fail")]
StrictHost = Annotated[bool, typer.Option(
    "--strict-host",
    help="refuse (exit 2) to serve an artifact tuned on a host that differs from this one in what "
         "its engine uses (CPU features, GPU compute capability or product, engine version); "
         "without it serve prints the difference and the tune command to run here")]
LogLevel = Annotated[str, typer.Option(help="uvicorn log level")]
WorkerProcess = Annotated[bool, typer.Option(
    "--worker-process/--in-process",
    help="run the model in a supervised engine process that is restarted when it dies (in-flight "
         "requests get 503, /metrics counts infertune_worker_restarts_total); several frontends or GPUs "
         "always run so")]
WorkerTimeoutS = Annotated[float, Duration(
    "with engine processes (--worker-process, --frontends N, several GPUs): an engine that holds "
    "requests and sends nothing for this long (a busy engine sends a heartbeat after every batch, so only a "
    "hung process or one batch longer than this counts) is stalled; it is killed and restarted")]
Ceiling = Annotated[bool, typer.Option(
    "--ceiling",
    help="do not serve: measure the forward-only ceiling (items/s with nothing but the "
         "model running, batches packed as the server packs them) on --workload's texts, "
         "print it and exit; compare with `infertune bench` against the server")]
Workload = Annotated[str | None, typer.Option(
    help="with --ceiling: JSONL/text of inputs (default: the embedded sample)")]
AsJson = Annotated[bool, typer.Option("--json", help="print the ServeResult as JSON to stdout on exit")]
CudaGraphs = Annotated[str | None, typer.Option(
    help="auto|on|off|padded|packed: on a GPU, replay each bucketed batch shape of a PyTorch engine "
         "as a CUDA graph, checked once against the eager forward (auto: wherever it can run, and a "
         "decoder embedder's batches packed padding-free with FlashAttention varlen; padded: graphs "
         "over padded batches only; packed: an encoder's batches packed too; off: eager, one Python "
         "call per kernel; default: what the artifact's tune measured, else auto)")]
Task = Annotated[str | None, typer.Option(
    help="embed: serve a causal-LM checkpoint (*ForCausalLM) as an embedder, e.g. a decoder "
         "embedder without modules.json (default: decided from the model's files)")]
Pooling = Annotated[str | None, typer.Option(
    help="override the model's pooling: mean|cls|max|last|mean_sqrt_len")]
Prompt = Annotated[list[str] | None, typer.Option(
    help="NAME=TEXT: an instruction prompt a request picks with \"prompt_name\": NAME "
         "(repeatable; adds to the model's config_sentence_transformers.json prompts)")]
DefaultPromptName = Annotated[str | None, typer.Option(
    help="the prompt applied when a request names none (default: the model's own default, else none)")]


def serve_cmd(
    model: Model = D["model"],
    host: Host = D["host"],
    port: Port = D["port"],
    device: Device = None,
    api_key: ApiKey = None,
    served_model_name: ServedModelName = None,
    batch_tokens: BatchTokens = None,
    max_batch_items: MaxBatchItems = None,
    max_batch_tokens: MaxBatchTokens = None,
    max_wait_ms: MaxWaitMs = None,
    max_padding: MaxPadding = None,
    tokenize_workers: TokenizeWorkers = None,
    threads: Threads = None,
    max_queue: MaxQueue = D["max_queue"],
    max_wait_s: MaxWaitS = None,
    rate_limit: RateLimit = None,
    max_items_per_request: MaxItemsPerRequest = D["max_items_per_request"],
    max_body_mb: MaxBodyMb = D["max_body_mb"],
    request_timeout_s: RequestTimeoutS = D["request_timeout_s"],
    truncate: Truncate = D["truncate"],
    graceful_timeout_s: GracefulTimeoutS = D["graceful_timeout_s"],
    drain_s: DrainS = D["drain_s"],
    frontends: Frontends = None,
    devices: Devices = None,
    strict_host: StrictHost = D["strict_host"],
    verify: VerifyFlag = D["verify"],
    log_level: LogLevel = D["log_level"],
    worker_process: WorkerProcess = D["worker_process"],
    worker_timeout_s: WorkerTimeoutS = D["worker_timeout_s"],
    ceiling: Ceiling = False,
    workload: Workload = None,
    as_json: AsJson = False,
    cuda_graphs: CudaGraphs = None,
    task: Task = None,
    pooling: Pooling = None,
    prompt: Prompt = None,
    default_prompt_name: DefaultPromptName = None,
) -> None:
    flags = dict(locals())  # every parameter by name, before any other local exists
    from infertune.extras import require

    require("serve-ceiling" if ceiling else "serve")
    from infertune.errors import InfertuneError
    from infertune.serve.app import serve

    if device not in (None, "cpu", "cuda"):
        raise InfertuneError(f"--device must be cpu or cuda, not {device!r}")
    if cuda_graphs not in (None, "auto", "on", "off", "padded", "packed"):
        raise InfertuneError(f"--cuda-graphs must be auto, on, off, padded or packed, not {cuda_graphs!r}")
    if ceiling:
        _print_ceiling(model, device, workload, batch_tokens, max_batch_items, cuda_graphs, task, as_json)
        return
    result = serve(_serve_config(flags))
    typer.echo(f"stopped after {result.uptime_s} s: {result.items} items in {result.batches} batches; "
               f"requests by status {result.requests}", err=True)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))


def _print_ceiling(model: str, device: str | None, workload: str | None, batch_tokens: int | None,
                   max_batch_items: int | None, cuda_graphs: str | None, task: str | None, as_json: bool) -> None:
    """--ceiling: measure the forward-only items/s and print it (on stderr with --json, the numbers on stdout)."""
    from infertune.serve.ceiling import forward_ceiling
    from infertune.workloads.texts import load_workload

    texts = load_workload(workload).items if workload else None
    c = forward_ceiling(model, device, texts, batch_tokens=batch_tokens, max_batch_items=max_batch_items,
                        progress=lambda m: typer.echo(m, err=True), cuda_graphs=cuda_graphs, task=task)
    typer.echo(f"forward-only ceiling of {model} on {c['device']}: {c['items_per_s']:,.1f} items/s (median of "
               f"n={c['n']} rounds, range {c['min']:,.1f}-{c['max']:,.1f}); {c['texts']} texts, "
               f"{c['tokens_per_item_mean']} tokens each on average, {c['batches']} batches of "
               f"{c['items_per_batch_mean']} items (budget {c['budget_tokens']} padded tokens, "
               f"<= {c['max_items']} items)",
               err=as_json)
    if as_json:
        typer.echo(json.dumps(c, indent=2))


def _serve_config(f: dict[str, Any]) -> ServeConfig:
    """The ServeConfig that serve_cmd's flags (`f`, by parameter name) describe."""
    devices = f["devices"]
    return ServeConfig(
        model=f["model"], host=f["host"], port=f["port"], device=f["device"], api_key=f["api_key"] or None,
        rate_limit=parse_rate(f["rate_limit"]) if f["rate_limit"] else None, max_wait_s=f["max_wait_s"],
        served_model_name=f["served_model_name"], batch_tokens=f["batch_tokens"],
        max_batch_items=f["max_batch_items"], max_batch_tokens=f["max_batch_tokens"], max_wait_ms=f["max_wait_ms"],
        max_padding=f["max_padding"], tokenize_workers=f["tokenize_workers"], threads=f["threads"],
        max_queue=f["max_queue"], max_items_per_request=f["max_items_per_request"],
        max_body_bytes=int(f["max_body_mb"] * 1024 * 1024), request_timeout_s=f["request_timeout_s"],
        truncate=f["truncate"], graceful_timeout_s=f["graceful_timeout_s"], log_level=f["log_level"],
        worker_process=f["worker_process"], worker_timeout_s=f["worker_timeout_s"], drain_s=f["drain_s"],
        frontends=f["frontends"], devices=[d.strip() for d in devices.split(",") if d.strip()] if devices else None,
        task=f["task"], pooling=f["pooling"], prompts=parse_prompts(f["prompt"]),
        default_prompt_name=f["default_prompt_name"], cuda_graphs=f["cuda_graphs"], strict_host=f["strict_host"],
        verify=f["verify"],
    )
