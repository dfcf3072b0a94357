"""The GPU embedding engines side by side on one model and workload, as `serve` runs them (CUDA graphs, packed
batches for a decoder): eager bf16, compiled bf16, compiled fp8 rowwise (torchao), compiled int8 weight-only...
Each engine: prepared, compiled while timed (warm_compile), then passes over the workload in the server's packed
batches, interleaved across engines; items/s median and range over n passes; a table last.

Usage: compiled_engines.py MODEL_DIR WORKLOAD.jsonl [ENGINE ...]   ENGINE: backend/precision[/quant], e.g.
torch-eager/bf16 torch-compile/bf16 torch-compile/fp8/torchao-fp8"""

import logging
import statistics
import sys
import time
import traceback
from pathlib import Path

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def engine(model: str, spec_id: str):
    from infertune.config import Candidate
    from infertune.engines.graphs import with_graphs
    from infertune.models.embedding import embedding_spec
    from infertune.models.resolve import resolve_model
    from infertune.registry import load_backend

    parts = spec_id.split("/")
    cand = Candidate(backend=parts[0], precision=parts[1], quant=parts[2] if len(parts) > 2 else None)
    spec = embedding_spec(resolve_model(model), None, "embed", None, None)
    t0 = time.perf_counter()
    emb = load_backend(cand.backend).prepare(spec, cand, "cuda", Path("/tmp/work"))
    g, why = with_graphs(emb, "auto")
    rec = {"prepare_s": round(time.perf_counter() - t0, 1), "graphs": why[:60]}
    if cand.backend == "torch-compile":
        from infertune.engines.torch_compile import warm_compile

        rec["compile"] = warm_compile(g)
    elif hasattr(g, "settle_packing"):
        g.settle_packing()
    return g, rec


def batches(emb, texts, budget=16384, max_items=2048):
    from infertune.batching import plan_packed

    ids = sorted(emb.token_ids(texts), key=len)
    plan = plan_packed([len(x) for x in ids], budget, max_items)
    return [emb.collate([ids[i] for i in b]) for b in plan], len(texts)


def one_pass(emb, bs) -> float:
    import torch

    t0 = time.perf_counter()
    for b in bs:
        emb.forward(b)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main(model: str, workload: str, specs: list[str], rounds: int = 5) -> None:
    import json

    import torch

    texts = [json.loads(x)["input"] for x in Path(workload).read_text().splitlines() if x.strip()]
    got = {}
    for s in specs:
        try:
            t0 = time.perf_counter()
            emb, rec = engine(model, s)
            bs, n = batches(emb, texts)
            one_pass(emb, bs)  # captures every shape of the workload (checked), then replays
            rec["warm_pass_s"] = round(time.perf_counter() - t0, 1)
            got[s] = (emb, bs, n, rec, [])
            print(s, rec, {k: emb.stats.get(k) for k in ("captured", "eager_shapes", "eager_batches", "replays")},
                  "packed", getattr(emb, "packed", None), flush=True)
        except Exception:  # noqa: BLE001
            print(f"{s} FAILED\n{traceback.format_exc()[-3000:]}", flush=True)
    for _ in range(rounds):  # interleaved
        for emb, bs, _n, _rec, walls in got.values():
            walls.append(one_pass(emb, bs))
    base = None
    print(f"\n{torch.cuda.get_device_name()} | {len(texts)} texts, packed batches of <= 16,384 tokens, n={rounds}")
    print("| engine | items/s median (range) | vs first | compile s (cache) | packed | shapes captured |")
    print("|---|---:|---:|---:|---|---:|")
    for s, (emb, _bs, n, rec, walls) in got.items():
        rates = [n / w for w in walls]
        med = statistics.median(rates)
        base = base or med
        c = rec.get("compile") or {}
        print(f"| {s} | {med:,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | {med / base:.2f}x | "
              f"{c.get('seconds', '-')} ({c.get('cache', '-')}) | {getattr(emb, 'packed', None)} | "
              f"{emb.stats.get('captured')} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:] or ["torch-eager/bf16", "torch-compile/bf16",
                                                    "torch-compile/fp8/torchao-fp8"])
