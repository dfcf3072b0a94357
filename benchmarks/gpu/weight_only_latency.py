"""Small-batch latency on a GPU: weight-only int8/int4 Linear layers (torchao) against 16-bit, at concurrency 1 and 4,
as `serve`'s engine runs them (compiled, CUDA graphs, packed batches for a decoder).

At concurrency c with one text per request, the server's batcher merges what is waiting: batches of c texts. Each
request here is one such batch: tokenized, collated, run and its rows copied back (the engine's forward), timed end
to end with the device synchronised. Requests are the workload's texts in order; engines take turns request by
request (interleaved), so a slow minute of the machine lands on all of them. Reported: P50 and P99 per engine and
concurrency over n requests, and each engine's worst row cosine against the first engine on the same texts.

Usage: weight_only_latency.py MODEL_DIR WORKLOAD.jsonl [N] [ENGINE ...]   ENGINE: backend/precision[/quant]
(default: torch-compile/bf16, torch-compile/int8/torchao-int8-wo, torch-compile/int4/torchao-int4-wo)"""

import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from compiled_engines import engine  # noqa: E402

DEFAULT = ["torch-compile/bf16", "torch-compile/int8/torchao-int8-wo", "torch-compile/int4/torchao-int4-wo"]


def requests(texts: list[str], n: int, c: int) -> list[list[str]]:
    """The n requests at concurrency c: batches of c consecutive workload texts."""
    return [[texts[(r * c + j) % len(texts)] for j in range(c)] for r in range(n)]


def one_request(emb, texts) -> tuple[float, np.ndarray]:
    import torch

    t0 = time.perf_counter()
    rows = emb.forward(emb.collate(emb.token_ids(texts)))
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000, rows


def main(model: str, workload: str, n: int, specs: list[str]) -> None:
    import torch

    from infertune.models.embedding import row_cosines

    texts = [json.loads(x)["input"] for x in Path(workload).read_text().splitlines() if x.strip()]
    engines = {}
    for s in specs:
        try:
            emb, rec = engine(model, s)
            t0 = time.perf_counter()
            for c in (1, 4):  # the timed requests once: every shape they use is captured and checked before timing
                for batch in requests(texts, n, c):
                    one_request(emb, batch)
            rec["warm_s"] = round(time.perf_counter() - t0, 1)
            engines[s] = emb
            print(s, rec, {k: emb.stats.get(k) for k in ("captured", "eager_shapes", "replays")}, flush=True)
        except Exception:  # noqa: BLE001 - an engine that cannot run here is reported, the others go on
            print(f"{s} FAILED\n{traceback.format_exc()[-2000:]}", flush=True)
    lat = {(s, c): [] for s in engines for c in (1, 4)}
    worst = dict.fromkeys(engines, 1.0)
    first = next(iter(engines), None)
    for c in (1, 4):
        for batch in requests(texts, n, c):
            got = {}
            for s, emb in engines.items():
                ms, got[s] = one_request(emb, batch)
                lat[(s, c)].append(ms)
            for s in engines:
                worst[s] = min(worst[s], float(row_cosines(got[s], got[first]).min()))
    print(f"\n{torch.cuda.get_device_name()} | {Path(model).name} | one text per request, batches of c texts, "
          f"n={n} requests per cell, engines interleaved")
    print("| engine | c=1 P50 ms | c=1 P99 ms | c=4 P50 ms | c=4 P99 ms | min cosine vs first |")
    print("|---|---:|---:|---:|---:|---:|")
    for s in engines:
        p = {c: np.percentile(lat[(s, c)], [50, 99]) for c in (1, 4)}
        print(f"| {s} | {p[1][0]:.2f} | {p[1][1]:.2f} | {p[4][0]:.2f} | {p[4][1]:.2f} | {worst[s]:.5f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 300, sys.argv[4:] or DEFAULT)
