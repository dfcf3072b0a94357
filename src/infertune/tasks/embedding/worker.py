"""The embedding family's job in a tune worker (infertune.tuning.worker runs it): prepare one engine, then answer
the parent's commands (embed, measure, invariance, save) until told to stop."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from infertune.engines.worker_setup import setup
from infertune.tuning.worker import answer_commands, peak_rss_mb


def _subset(texts: list[str], args: dict[str, Any]) -> list[str]:
    """The texts a command sends (`texts`: the user's eval pairs), names by position (`subset`), or all of them."""
    if args.get("texts") is not None:
        return list(args["texts"])
    return texts if args.get("subset") is None else [texts[i] for i in args["subset"]]


def serve(conn, job: dict[str, Any]) -> None:
    from infertune.config import Batching, Candidate
    from infertune.models.embedding import EmbeddingSpec
    from infertune.registry import load_backend

    setup(job.get("threads"), job.get("device", "cpu"))
    spec = EmbeddingSpec(**job["spec"])
    cand = Candidate.model_validate(job["candidate"])
    device = job["device"]
    texts: list[str] = job.get("texts", [])
    t0 = time.perf_counter()
    backend = load_backend(cand.backend)
    emb = backend.prepare(spec, cand, device, Path(job["workdir"]), job.get("calibration", []))
    if device == "cuda":  # measured as `serve` runs it: CUDA graphs, packed batches where the candidate says
        from infertune.engines.graphs import tuned_engine
        from infertune.engines.overlap import start_tokenizers

        emb = tuned_engine(emb, cand, device)
        start_tokenizers(emb)  # part of preparing, not of the first timed pass
    record: dict[str, Any] = {}
    if cand.backend == "torch-compile":  # the compile is part of preparing (and its cost the candidate's own)
        from infertune.engines.torch_compile import warm_compile

        record["compile"] = warm_compile(emb)
    from infertune.tasks.embedding.kernels import record as kernel_record

    kernels = kernel_record(emb, texts)  # one profiled batch: the GEMMs that ran, after any compile

    def embed(args: dict[str, Any]) -> Any:
        return emb.embed(_subset(texts, args), Batching.model_validate(args["batching"]), pooled=True)

    def measure(args: dict[str, Any]) -> dict[str, Any]:
        batching = Batching.model_validate(args["batching"])
        if hasattr(emb, "max_tokens") and batching.kind == "tokens":
            emb.max_tokens = batching.size  # CUDA graphs up to the budget measured, as serve sizes them
        sub = _subset(texts, args)
        cap, seed = args.get("max_s"), args.get("shuffle")
        limit = None
        for _ in range(args.get("warmup", 0)):
            w = emb.measure_pass(sub, batching, max_s=args.get("warmup_max_s", cap), shuffle=seed)
            limit = w["batches"] if args.get("match_warmup") else None
        # match_warmup: the timed pass runs exactly the batches the warm-up ran, so no shape meets
        # its first run (oneDNN/AMX kernel creation, a compile) inside the timed pass
        passes = [emb.measure_pass(sub, batching, max_s=None if limit else cap, shuffle=seed,
                                   max_batches=limit) for _ in range(args.get("passes", 1))]
        gpu = None
        if device == "cuda":
            import torch

            gpu = torch.cuda.max_memory_allocated() / 2**20
        return {"passes": passes, "peak_rss_mb": peak_rss_mb(), "peak_gpu_mb": gpu}

    def invariance(args: dict[str, Any]) -> dict[str, Any]:  # the sample alone and in mixed batches
        from infertune.tasks.embedding.invariance import run

        return run(emb, _subset(texts, args), args["lengths"])

    def speed(args: dict[str, Any]) -> dict[str, Any]:  # the figure `infertune verify` compares with (held.py)
        from infertune.tasks.embedding.held import measure_speed

        return measure_speed(emb, list(args["texts"]), Batching.model_validate(args["batching"]), args["passes"])

    executed = emb.describe() if kernels is None else {**emb.describe(), "kernels": kernels}
    conn.send(("ok", {"prepare_s": time.perf_counter() - t0, "executed": executed, "record": record}))
    answer_commands(conn, {"embed": embed, "measure": measure, "invariance": invariance, "speed": speed,
                           "save": lambda args: emb.save(Path(args["path"])), "kernels": lambda args: kernels})
