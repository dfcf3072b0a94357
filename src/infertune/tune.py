"""`infertune.tune(config)`: tune a model on a workload. The public verb picks the family's task (`make_task`:
embedding, causal LM served by vLLM, or our torch decode loops) and hands it to the loop (`infertune.tuning`), so
the loop never imports its plugins (`infertune.tasks` and the engines they run). `infertune.tune(...)` itself is this
module's `tune`: see `infertune/_api.py`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infertune.config import TuneConfig
from infertune.errors import InfertuneError
from infertune.tuning.driver import NO_WINNER_EXIT

if TYPE_CHECKING:  # pragma: no cover
    from infertune.results import TuneResult

__all__ = ["tune", "NO_WINNER_EXIT", "make_task", "print_summary"]


def tune(config: TuneConfig | None = None, quiet: bool = False, candidates: list | None = None) -> TuneResult:
    """Tune a model on a workload; returns the TuneResult also written to results.json.

    `candidates` (embeddings) replaces the default candidate list (the naive baseline and the fp32
    reference are always added), e.g. to try a third-party backend registered under `infertune.backends`."""
    from infertune.tuning.driver import run

    return run(config or TuneConfig(), make_task, quiet=quiet, candidates=candidates)


def make_task(cfg: TuneConfig, console, candidates=None):
    """The task for the model's family (embedding, causal LM)."""
    from infertune.models.kind import model_kind
    from infertune.models.resolve import resolve_model

    ref = resolve_model(cfg.model)
    kind = model_kind(ref, cfg.task)
    article = "an" if kind.label[:1] in "aeiou" else "a"
    console.print(f"model: {ref.name} is {article} {kind.label} ({kind.why})", highlight=False)
    if kind.task == "generate":
        from infertune.tasks.causal_lm.task import CausalLMTask

        if cfg.eval_pairs is not None or cfg.eval_fn:
            raise InfertuneError(f"--eval-pairs and --eval score embeddings; {ref.name} is a {kind.label} "
                                 "(its accuracy budget is --max-ppl-delta and --min-top1)")

        if lm_engine(cfg, console) == "vllm":
            from infertune.tasks.causal_lm.served import ServedLMTask

            return ServedLMTask(cfg, console, ref)
        if cfg.slo_ttft_ms or cfg.slo_tpot_ms:
            raise InfertuneError("--slo-ttft-ms and --slo-tpot-ms judge servers under load, and the torch engine "
                                 "measures batch-1 decode loops; install vLLM (`make vllm-env`) or drop the SLO flags "
                                 "with --lm-engine torch")
        return CausalLMTask(cfg, console, ref)
    if cfg.slo_ttft_ms or cfg.slo_tpot_ms:
        raise InfertuneError(f"--slo-ttft-ms and --slo-tpot-ms are for causal LMs; {ref.name} is {article} "
                             f"{kind.label}: its latency SLO is --slo-p99-ms (one batch, in ms)")
    from infertune.tasks.embedding.task import EmbeddingTask

    return EmbeddingTask(cfg, console, ref, candidates)


def lm_engine(cfg: TuneConfig, console) -> str:
    """vllm or torch for a causal LM: `auto` takes vllm where a vLLM install is found (and says so either way)."""
    if cfg.lm_engine != "auto":
        return cfg.lm_engine
    from infertune.engines.causal_lm.vllm_server import find_vllm

    try:
        find_vllm(cfg.device)
    except InfertuneError as e:
        console.print(f"[yellow]no vLLM here ({str(e).splitlines()[0]}): measuring infertune's own torch decode "
                      "loops instead, a roofline diagnosis; the artifact is served by vLLM with float weights[/]",
                      highlight=False)
        return "torch"
    return "vllm"


def print_summary(result: TuneResult) -> None:
    """The console summary of a tune, by family (stderr)."""
    from infertune.tuning.summary import print_search

    if result.kind == "causal-lm" and result.lm.get("engine") == "vllm":
        from infertune.tasks.causal_lm.served_report import print_served_summary

        print_served_summary(result)
        return print_search(result)
    if result.kind == "causal-lm":
        from infertune.tasks.causal_lm.report import print_lm_summary

        print_lm_summary(result)
        return print_search(result)
    from infertune.tasks.embedding.report import print_summary as print_embedding_summary

    return print_embedding_summary(result)
