"""The CPU engines side by side on MiniLM, in one process, interleaved: every round gives each engine one
timed pass over the same texts (length-sorted batches under a padded-token budget, tokenization
included), so drift on a shared box spreads over all of them. Prints prepare seconds, items/s (median,
min-max, n) and cosine vs PyTorch fp32 (mean / min) per engine, plus the environment.

    HF_HUB_OFFLINE=1 PYTHONPATH=src .venv/bin/python scripts/bench_cpu_engines.py --items 200 --passes 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

ENGINES = [  # (label, candidate kwargs)
    ("torch fp32", {"backend": "torch-eager"}),
    ("ORT fp32", {"backend": "onnxruntime"}),
    ("ORT dynamic int8", {"backend": "onnxruntime", "precision": "int8", "quant": "ort-dynamic"}),
    ("ORT static int8", {"backend": "onnxruntime", "precision": "int8", "quant": "ort-static"}),
    ("ORT static int8, all 36 Linear", {"backend": "onnxruntime", "precision": "int8", "quant": "ort-static",
                                        "options": (("ffn_down", "int8"),)}),
    ("ORT static int8, Percentile", {"backend": "onnxruntime", "precision": "int8", "quant": "ort-static",
                                     "options": (("calibration", "percentile"),)}),
    ("OpenVINO fp32", {"backend": "openvino"}),
    ("OpenVINO int8 (NNCF)", {"backend": "openvino", "precision": "int8", "quant": "nncf-ptq"}),
    ("OpenVINO bf16", {"backend": "openvino", "precision": "bf16"}),
    ("torch bf16", {"backend": "torch-eager", "precision": "bf16"}),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--calibration", type=int, default=64)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--budget", type=int, default=512, help="padded tokens per batch")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/infertune-bench-cpu-engines")
    ap.add_argument("--only", default="", help="comma-separated substrings of engine labels")
    a = ap.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    from infertune.config import Batching, Candidate
    from infertune.fingerprint import fingerprint
    from infertune.models.embedding import embedding_spec, load_tokenizer
    from infertune.registry import load_backend
    from infertune.workload import load_workload, stratified_split, stratified_subsample

    spec = embedding_spec("minilm")
    items = load_workload(None).items
    lengths = [len(x) for x in load_tokenizer(spec)(items, truncation=False)["input_ids"]]
    calib_i, eval_i = stratified_split(lengths, 0.7, 0)
    evals = [items[i] for i in stratified_subsample(eval_i, lengths, a.items, 0)]
    calib = [items[i] for i in stratified_subsample(calib_i, lengths, a.calibration, 0)]
    batching = Batching(kind="tokens", size=a.budget)
    work = Path(a.work)
    engines = [(lab, kw) for lab, kw in ENGINES if not a.only or any(s in lab for s in a.only.split(","))]

    prepared, rows = {}, {}
    for label, kw in engines:
        cand = Candidate(**kw)
        backend = load_backend(cand.backend)
        if reason := backend.available(cand, "cpu"):
            rows[label] = {"skipped": reason}
            continue
        t0 = time.perf_counter()
        emb = backend.prepare(spec, cand, "cpu", work, calib)
        rows[label] = {"prepare_s": round(time.perf_counter() - t0, 1), "describe": emb.describe()}
        prepared[label] = emb
        print(f"prepared {label} in {rows[label]['prepare_s']} s", flush=True)

    ref = prepared["torch fp32"].embed(evals, batching, pooled=True)
    for label, emb in prepared.items():
        v = emb.embed(evals, batching, pooled=True)
        cos = (v * ref).sum(1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(ref, axis=1))
        rows[label].update(cos_mean=float(cos.mean()), cos_min=float(cos.min()))
        emb.measure_pass(evals, batching)  # warm-up
        rows[label]["items_per_s"] = []
    for r in range(a.passes):
        order = list(prepared.items())
        order = order[r % len(order):] + order[: r % len(order)]  # rotate who goes first
        for label, emb in order:
            m = emb.measure_pass(evals, batching)
            rows[label]["items_per_s"].append(m["items"] / m["wall_s"])
        print(f"round {r + 1}/{a.passes} done", flush=True)

    tokens = sum(min(n, spec.max_length) for n in (lengths[items.index(t)] for t in evals))
    env = fingerprint(a.threads).model_dump(mode="json")
    print(f"\n{len(evals)} texts ({tokens} tokens, mean {tokens / len(evals):.0f}), batches of <= {a.budget} "
          f"padded tokens, {a.threads} threads, {len(calib)} calibration texts; {env.get('cpu_model')}")
    base = statistics.median(rows["torch fp32"]["items_per_s"])
    print("| engine | prepare s | items/s median (min-max, n) | x torch fp32 | cos mean / min |")
    print("|---|---|---|---|---|")
    for label, row in rows.items():
        if "skipped" in row:
            print(f"| {label} | skipped: {row['skipped']} | | | |")
            continue
        xs = row["items_per_s"]
        med = statistics.median(xs)
        print(f"| {label} | {row['prepare_s']} | {med:.1f} ({min(xs):.1f}-{max(xs):.1f}, n={len(xs)}) | "
              f"{med / base:.2f} | {row['cos_mean']:.5f} / {row['cos_min']:.4f} |")
    Path(work).mkdir(parents=True, exist_ok=True)
    (work / "results.json").write_text(json.dumps({"rows": rows, "env": env}, indent=2, default=str))
    print(f"details (describe() of each engine, every pass): {work / 'results.json'}")


if __name__ == "__main__":
    main()
