"""`infertune tune`: thin shell over infertune.tune.tune()."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from infertune.cli.options import Duration, commas, config_defaults
from infertune.config import SLO, AccuracyBudget, LMAccuracyBudget, TuneConfig

# flags whose default a config model holds -> that field (tests/unit/cli/test_cli_defaults.py holds them equal)
CONFIG_FIELDS = {
    "model": (TuneConfig, "model"), "device": (TuneConfig, "device"), "slo_p99_ms": (SLO, "p99_ms"),
    "min_cosine": (AccuracyBudget, "min_cosine_mean"), "min_cosine_min": (AccuracyBudget, "min_cosine_min"),
    "min_topk_overlap": (AccuracyBudget, "min_topk_overlap"), "min_bucket_items": (AccuracyBudget, "min_bucket_items"),
    "max_recall_drop": (AccuracyBudget, "max_recall_drop"), "max_eval_drop": (AccuracyBudget, "max_eval_drop"),
    "quick": (TuneConfig, "quick"), "rounds": (TuneConfig, "rounds"), "confirm_rounds": (TuneConfig, "confirm_rounds"),
    "tie_margin": (TuneConfig, "tie_margin"), "max_ppl_delta": (LMAccuracyBudget, "max_ppl_delta_rel"),
    "min_top1": (LMAccuracyBudget, "min_top1_agreement"), "lm_engine": (TuneConfig, "lm_engine"),
    "lm_concurrency": (TuneConfig, "lm_concurrency"), "lm_batches": (TuneConfig, "lm_batches", commas),
    "lm_time_budget": (TuneConfig, "lm_time_budget_s"), "drop_below": (TuneConfig, "drop_below"),
    "keep_exports": (TuneConfig, "keep_exports"),
}
D = config_defaults(CONFIG_FIELDS)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_cmd)


# each flag's type and help, so that tune_cmd's signature reads as the list of flags and their defaults
Model = Annotated[str, typer.Argument(
    help="alias (minilm, smollm2), model directory, .gguf or config.json")]
Workload = Annotated[Path | None, typer.Option(
    help="JSONL ({\"input\": ...} or {\"text\": ...}) or text, one item a line; default: built-in sample")]
Device = Annotated[str, typer.Option(help="cpu or cuda")]
SloP99Ms = Annotated[float, typer.Option(
    help="P99 latency of one batch inside the server, tokenization included, queueing "
         "not (ms); bench/validate --slo is per request, end to end")]
MinCosine = Annotated[float, typer.Option(help="accuracy budget: mean cosine vs fp32 reference")]
MinCosineMin = Annotated[float, typer.Option(
    help="accuracy budget: worst single item's cosine")]
MinTopkOverlap = Annotated[float, typer.Option(
    help="accuracy budget: mean share of each text's 10 nearest neighbours (among "
         "the verified texts) kept; 0 = not enforced")]
MinBucketItems = Annotated[int, typer.Option(
    help="accuracy budget: the mean cosine and top-10 are also checked in every token-length "
         "bucket with at least this many verified texts")]
EvalPairs = Annotated[Path | None, typer.Option(
    help="embeddings: JSONL of {\"query\", \"positive\"[, \"negatives\": [...]]}; recall@10 and MRR over a corpus "
         "of the file's documents, for the reference and each candidate")]
MaxRecallDrop = Annotated[float, typer.Option(
    help="--eval-pairs: recall@10 may fall this far below the "
         "reference's (absolute)")]
EvalFn = Annotated[str | None, typer.Option(
    "--eval",
    help="embeddings: module:function or path/to/file.py:function, called with embed(texts) -> unit vectors "
         "(numpy); returns {name: value} (higher is better) or {name: (value, 'higher'|'lower')}")]
MaxEvalDrop = Annotated[float, typer.Option(
    help="--eval: each metric may be this much worse than the "
         "reference's, in its own units")]
Quick = Annotated[bool, typer.Option(
    help="fewer candidates, items and rounds (about 2 min on 2 cores)")]
Out = Annotated[Path | None, typer.Option(help="output directory (default runs/<timestamp>)")]
Candidates = Annotated[str | None, typer.Option(
    help="comma-separated substrings of candidate ids to keep, e.g. 'bf16,onnxruntime'")]
Rounds = Annotated[int, typer.Option(
    help="timed passes over the eval split per candidate, interleaved (after one "
         "warm-up pass); leaders get --confirm-rounds more")]
ConfirmRounds = Annotated[int, typer.Option(
    help="extra interleaved passes for the 3 leaders and the baseline")]
TieMargin = Annotated[float, typer.Option(
    help="a simpler engine (eager < onnxruntime < compile) this close "
         "to the fastest wins (0.05 = 5%)")]
Threads = Annotated[int | None, typer.Option(help="torch/ORT threads (default: all cores)")]
MaxEvalItems = Annotated[int | None, typer.Option(help="cap on eval items (stratified by length)")]
Pooling = Annotated[str | None, typer.Option(
    help="override pooling for plain HF encoders: mean|cls|max|last")]
Task = Annotated[str | None, typer.Option(
    help="embed or generate, when the model's files do not say (a decoder embedder "
         "published as *ForCausalLM without modules.json: --task embed)")]
Dimensions = Annotated[str | None, typer.Option(
    help="embeddings: judge accuracy on the first N dimensions (Matryoshka), as clients will request them; auto: "
         "the smallest prefix a Matryoshka-trained model keeps within budget (a model not trained for it keeps "
         "every dimension and is told what truncation costs)")]
Peers = Annotated[str | None, typer.Option(
    help="embeddings: after tuning, serve the artifact with `infertune serve` and these engines (vllm: its pooling "
         "runner, from .venv-vllm or $INFERTUNE_VLLM_PYTHON) on the source model, each in its own process, and "
         "measure them side by side on the workload (results.json 'peers')")]
MaxPplDelta = Annotated[float, typer.Option(
    help="causal LMs: allowed perplexity rise vs the reference (0.02 = +2%)")]
MinTop1 = Annotated[float, typer.Option(
    help="causal LMs: minimum next-token top-1 agreement with the reference")]
SloTtftMs = Annotated[float | None, typer.Option(
    help="causal LMs served by vLLM: P99 time to first token (ms); the "
         "pick is the highest request rate meeting every SLO given")]
SloTpotMs = Annotated[float | None, typer.Option(
    help="causal LMs served by vLLM: P99 time per output token (ms)")]
LmEngine = Annotated[str, typer.Option(
    help="causal LMs: vllm (checkpoints x vLLM arguments, measured as served; the winner is what `serve` runs), "
         "torch (our batch-1 decode loops: a roofline diagnosis), "
         "auto (vllm where installed)")]
LmConcurrency = Annotated[int, typer.Option(
    help="causal LMs (vllm): requests in flight for closed-loop points (the "
         "probe; the pick without an SLO)")]
LmMaxTokens = Annotated[int | None, typer.Option(
    help="causal LMs (vllm): cap on each request's output tokens (default: the workload's max_tokens)")]
VllmArgs = Annotated[str | None, typer.Option(
    help="causal LMs (vllm): arguments every vLLM server gets, the reference too, e.g. '--enforce-eager' (no "
         "compile at start) or '--gpu-memory-utilization 0.8'")]
LmBatches = Annotated[str, typer.Option(
    help="causal LMs: decode batch sizes for TPOT, comma-separated (--quick: batch 1 only, unless given)")]
LmTimeBudget = Annotated[float, Duration(
    "causal LMs: the default --time-budget (a third with --quick for the torch decode loops on CPU)")]
TimeBudget = Annotated[float | None, Duration(
    "wall-clock budget of the whole run, honoured within ~10%: every stage scales to it and candidates that cannot "
    "start in time are skipped with that reason. Default: 5m (2.5m with --quick) "
    "for embeddings on CPU, 3m on GPU, --lm-time-budget for causal LMs")]
DropBelow = Annotated[float, typer.Option(
    help="successive halving: drop a candidate whose short probe runs below this fraction of "
         "the best verified probe so far (0 keeps every candidate)")]
KeepExports = Annotated[bool, typer.Option(
    help="keep every candidate's exported files (ONNX, quantized ONNX) in "
         "<out>/exports; by default only the winner's artifact stays")]
BatchInvarianceTol = Annotated[float | None, typer.Option(
    help="embeddings: reject a candidate whose vector of a text moves more than this (1 - cos) between the text "
         "embedded alone and inside mixed batches; default (1 - --min-cosine) / 10; engines that scale "
         "activations per batch (dynamic int8) up to 4x their own 1 - min cosine vs the reference")]
AsJson = Annotated[bool, typer.Option("--json", help="print results.json to stdout; humans read stderr")]


def tune_cmd(
    model: Model = D["model"],
    workload: Workload = None,
    device: Device = D["device"],
    slo_p99_ms: SloP99Ms = D["slo_p99_ms"],
    min_cosine: MinCosine = D["min_cosine"],
    min_cosine_min: MinCosineMin = D["min_cosine_min"],
    min_topk_overlap: MinTopkOverlap = D["min_topk_overlap"],
    min_bucket_items: MinBucketItems = D["min_bucket_items"],
    eval_pairs: EvalPairs = None,
    max_recall_drop: MaxRecallDrop = D["max_recall_drop"],
    eval_fn: EvalFn = None,
    max_eval_drop: MaxEvalDrop = D["max_eval_drop"],
    batch_invariance_tol: BatchInvarianceTol = None,
    quick: Quick = D["quick"],
    out: Out = None,
    candidates: Candidates = None,
    rounds: Rounds = D["rounds"],
    confirm_rounds: ConfirmRounds = D["confirm_rounds"],
    tie_margin: TieMargin = D["tie_margin"],
    threads: Threads = None,
    max_eval_items: MaxEvalItems = None,
    pooling: Pooling = None,
    task: Task = None,
    dimensions: Dimensions = None,
    peers: Peers = None,
    max_ppl_delta: MaxPplDelta = D["max_ppl_delta"],
    min_top1: MinTop1 = D["min_top1"],
    slo_ttft_ms: SloTtftMs = None,
    slo_tpot_ms: SloTpotMs = None,
    lm_engine: LmEngine = D["lm_engine"],
    lm_concurrency: LmConcurrency = D["lm_concurrency"],
    lm_max_tokens: LmMaxTokens = None,
    vllm_args: VllmArgs = None,
    lm_batches: LmBatches = D["lm_batches"],
    lm_time_budget: LmTimeBudget = D["lm_time_budget"],
    time_budget: TimeBudget = None,
    drop_below: DropBelow = D["drop_below"],
    keep_exports: KeepExports = D["keep_exports"],
    as_json: AsJson = False,
) -> None:
    """Measure candidates (engine x precision x batching) chosen for this host on your workload, verify
    each against the original, and keep the fastest that meets the SLO and the accuracy budget.

    The search: every candidate gets a short probe and is dropped when clearly behind (--drop-below);
    survivors are verified, their batch token budget is searched against the SLO, then they are measured
    in interleaved rounds and the leaders confirmed, all inside --time-budget.

    Writes results.json, report.html and artifact/ (servable with `infertune serve`).
    Exit codes: 0 a winner; 2 bad input; 3 no candidate met the constraints (results.json's
    `achievable` and the printed decision give the flags that would admit the best ones)."""
    flags = dict(locals())  # every parameter by name, before any other local exists
    from infertune.extras import require

    require("tune")
    from infertune.cli.options import stop_on_sigterm
    from infertune.tune import tune

    stop_on_sigterm()
    result = tune(_tune_config(flags))
    _print_result(result, as_json)


def _tune_config(f: dict[str, Any]) -> TuneConfig:
    """The TuneConfig that tune_cmd's flags (`f`, by parameter name) describe."""
    from infertune.errors import InfertuneError

    if f["lm_engine"] not in ("auto", "vllm", "torch"):
        raise InfertuneError(f"--lm-engine must be auto, vllm or torch, not {f['lm_engine']!r}")
    if f["device"] not in ("cpu", "cuda"):
        raise InfertuneError(f"--device must be cpu or cuda, not {f['device']!r}")
    candidates, peers = f["candidates"], f["peers"]
    return TuneConfig(
        model=f["model"], workload=f["workload"], device=f["device"], slo=SLO(p99_ms=f["slo_p99_ms"]),
        accuracy=AccuracyBudget(min_cosine_mean=f["min_cosine"], min_cosine_min=f["min_cosine_min"],
                                min_topk_overlap=f["min_topk_overlap"], min_bucket_items=f["min_bucket_items"],
                                max_recall_drop=f["max_recall_drop"], max_eval_drop=f["max_eval_drop"],
                                batch_invariance_tol=f["batch_invariance_tol"]),
        eval_pairs=f["eval_pairs"], eval_fn=f["eval_fn"], quick=f["quick"], out=f["out"],
        candidates=[c.strip() for c in candidates.split(",") if c.strip()] if candidates else None,
        rounds=f["rounds"], confirm_rounds=f["confirm_rounds"], tie_margin=f["tie_margin"], threads=f["threads"],
        max_eval_items=f["max_eval_items"], pooling=f["pooling"], task=f["task"], dimensions=f["dimensions"],
        peers=[p.strip() for p in (peers or "").split(",") if p.strip()],
        lm_accuracy=LMAccuracyBudget(max_ppl_delta_rel=f["max_ppl_delta"], min_top1_agreement=f["min_top1"]),
        slo_ttft_ms=f["slo_ttft_ms"], slo_tpot_ms=f["slo_tpot_ms"], lm_engine=f["lm_engine"],
        lm_concurrency=f["lm_concurrency"], lm_max_tokens=f["lm_max_tokens"],
        lm_vllm_args=tuple(shlex.split(f["vllm_args"] or "")), lm_batches=_batches(f["lm_batches"]),
        lm_time_budget_s=f["lm_time_budget"], time_budget_s=f["time_budget"],
        drop_below=f["drop_below"], keep_exports=f["keep_exports"],
    )


def _print_result(result: Any, as_json: bool) -> None:
    """The summary on stderr, results.json on stdout with --json; exit 3 when no candidate won."""
    from infertune.tune import print_summary

    print_summary(result)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))
    if result.winner is None:  # results.json and report.html are written; `achievable` says what would pass
        from infertune.tune import NO_WINNER_EXIT

        raise typer.Exit(NO_WINNER_EXIT)


def _batches(text: str) -> tuple[int, ...]:
    from infertune.errors import InfertuneError

    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise InfertuneError(f"--lm-batches must be positive integers separated by commas, e.g. 1,8,32; got {text!r}")
    return out
